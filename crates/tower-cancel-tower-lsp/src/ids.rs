//! The id a request carries inside tower-lsp: the client's own where tower-lsp can cancel it, an alias elsewhere.
//!
//! tower-lsp keys its table of running requests by id, and its `$/cancelRequest` handler reads the id as LSP's
//! `integer | string`, an `i32`: a numeric id outside `i32` could be registered but never cancelled, so its entry
//! would outlive a request the adapter dropped. Such a request runs under an alias, a string id only the adapter
//! makes. A client's string id that looks like an alias is aliased too, so an alias never meets a client's id.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Value};
use tower_cancel::Id;
use tower_lsp_server::jsonrpc;

/// What every alias begins with.
const ALIAS_PREFIX: &str = "tower-cancel-tower-lsp/alias/";

/// Hands out the ids requests carry inside tower-lsp (one per adapter: ids are per connection).
#[derive(Debug, Default)]
pub(crate) struct Aliases {
    next: AtomicU64,
}

impl Aliases {
    /// The id `id` carries inside tower-lsp: itself when tower-lsp's cancel can name it, a fresh alias otherwise.
    pub(crate) fn inner_id(&self, id: &Id) -> jsonrpc::Id {
        match id {
            Id::Number(n) if i32::try_from(*n).is_ok() => jsonrpc::Id::Number(*n),
            Id::String(s) if !s.starts_with(ALIAS_PREFIX) => jsonrpc::Id::String(s.clone()),
            _ => {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                jsonrpc::Id::String(format!("{ALIAS_PREFIX}{n}"))
            }
        }
    }
}

/// The params of the `$/cancelRequest` that removes `id` from tower-lsp's table.
pub(crate) fn cancel_params(id: &jsonrpc::Id) -> Value {
    json!({ "id": id })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_tower_lsp_can_cancel_pass_through() {
        let aliases = Aliases::default();
        assert_eq!(aliases.inner_id(&Id::Number(7)), jsonrpc::Id::Number(7));
        assert_eq!(
            aliases.inner_id(&Id::Number(i32::MIN.into())),
            jsonrpc::Id::Number(i32::MIN.into())
        );
        assert_eq!(
            aliases.inner_id(&Id::from("abc")),
            jsonrpc::Id::String("abc".into())
        );
    }

    #[test]
    fn other_ids_get_distinct_aliases() {
        let aliases = Aliases::default();
        let big = aliases.inner_id(&Id::Number(i64::from(i32::MAX) + 1));
        let forged = aliases.inner_id(&Id::String(format!("{ALIAS_PREFIX}1")));
        let other = aliases.inner_id(&Id::Number(i64::MIN));
        assert_eq!(big, jsonrpc::Id::String(format!("{ALIAS_PREFIX}0")));
        assert_eq!(forged, jsonrpc::Id::String(format!("{ALIAS_PREFIX}1")));
        assert_eq!(other, jsonrpc::Id::String(format!("{ALIAS_PREFIX}2")));
        assert_eq!(
            cancel_params(&big),
            json!({"id": format!("{ALIAS_PREFIX}0")})
        );
    }
}
