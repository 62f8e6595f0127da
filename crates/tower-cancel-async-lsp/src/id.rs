//! Request ids from tower-cancel's (any integer an `i64` holds, or a string) to async-lsp's (`i32` or a string).

use async_lsp::RequestId;
use tower_cancel::Id;

/// Starts every alias, and is doubled in front of a string id that starts with it, so that no two ids of the
/// wire share an async-lsp id.
const ALIAS: char = '\u{1}';

/// The id async-lsp's services see for `id`: the same id where async-lsp can hold it; otherwise (an integer
/// outside `i32`) a string private to the adapter, `"\u{1}<n>"`. A client's string id that starts with `\u{1}`
/// gets one more in front, so an alias never equals a real id.
///
/// Only services that read the id see it (a `Router` handler is given the params alone): the reply goes out with
/// the id of the wire, which tower-cancel keeps.
pub(crate) fn to_async_lsp(id: &Id) -> RequestId {
    match id {
        Id::Number(n) => match i32::try_from(*n) {
            Ok(small) => RequestId::Number(small),
            Err(_) => RequestId::String(format!("{ALIAS}{n}")),
        },
        Id::String(s) if s.starts_with(ALIAS) => RequestId::String(format!("{ALIAS}{s}")),
        Id::String(s) => RequestId::String(s.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_async_lsp_can_hold_pass_unchanged() {
        assert_eq!(to_async_lsp(&Id::Number(7)), RequestId::Number(7));
        assert_eq!(
            to_async_lsp(&Id::Number(i32::MIN.into())),
            RequestId::Number(i32::MIN)
        );
        assert_eq!(
            to_async_lsp(&Id::from("abc")),
            RequestId::String("abc".into())
        );
    }

    #[test]
    fn aliases_never_equal_a_real_id() {
        let big = to_async_lsp(&Id::Number(i64::from(i32::MAX) + 1));
        assert_eq!(big, RequestId::String("\u{1}2147483648".into()));
        // The string a client could send to collide with the alias gets an alias of its own.
        let lookalike = to_async_lsp(&Id::from("\u{1}2147483648"));
        assert_ne!(lookalike, big);
        assert_ne!(lookalike, RequestId::String("\u{1}2147483648".into()));
    }
}
