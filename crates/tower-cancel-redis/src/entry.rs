//! A remote cancel as the fields of one Redis Stream entry, and back.
//!
//! | field | value |
//! |---|---|
//! | `scope` | the scope key |
//! | `id` | the request id as JSON: `7` or `"abc"` |
//! | `reason` | `peer`, `timeout`, `disconnect`, `shutdown`, `parent` or `local` |
//! | `text` | the reason's text, when it has one |
//! | `canceller` | who sent the cancel, when known |
//! | `origin` | the publishing replica |
//! | `at` | the publisher's wall clock, milliseconds since the Unix epoch |

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tower_cancel::{bus::RemoteCancel, CancelReason, Id};

/// The fields of `cancel`, in the order they are written.
pub(crate) fn to_fields(cancel: &RemoteCancel) -> Vec<(&'static str, String)> {
    let (kind, text) = reason_parts(&cancel.reason);
    let at = cancel
        .sent_at
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let mut fields = vec![
        ("scope", cancel.scope.clone()),
        ("id", serde_json::to_string(&cancel.id).unwrap_or_default()),
        ("reason", kind.to_owned()),
        ("origin", cancel.origin.clone()),
        ("at", at.to_string()),
    ];
    if let Some(text) = text {
        fields.push(("text", text.to_owned()));
    }
    if let Some(canceller) = &cancel.canceller {
        fields.push(("canceller", canceller.clone()));
    }
    fields
}

/// Why an entry is not a cancel.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

/// The cancel in an entry's fields (field name, value), as `XREAD` returns them.
pub(crate) fn from_fields<'a>(
    fields: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<RemoteCancel, Malformed> {
    let (mut scope, mut id, mut kind, mut text, mut canceller, mut origin, mut at) =
        (None, None, None, None, None, None, None);
    for (name, value) in fields {
        let value = std::str::from_utf8(value).map_err(|_| Malformed("a field is not UTF-8"))?;
        match name {
            "scope" => scope = Some(value),
            "id" => id = Some(value),
            "reason" => kind = Some(value),
            "text" => text = Some(value),
            "canceller" => canceller = Some(value),
            "origin" => origin = Some(value),
            "at" => at = Some(value),
            // Fields a later version adds are not ours to refuse.
            _ => {}
        }
    }
    let id: Id = serde_json::from_str(id.ok_or(Malformed("no id"))?)
        .map_err(|_| Malformed("the id is not a JSON-RPC id"))?;
    let reason = reason_from(kind.ok_or(Malformed("no reason"))?, text)?;
    let at: u64 = at
        .ok_or(Malformed("no time"))?
        .parse()
        .map_err(|_| Malformed("the time is not a number"))?;
    let mut cancel = RemoteCancel::new(
        scope.ok_or(Malformed("no scope"))?,
        id,
        reason,
        origin.ok_or(Malformed("no origin"))?,
    )
    .canceller(canceller.map(str::to_owned));
    cancel.sent_at = UNIX_EPOCH + Duration::from_millis(at);
    Ok(cancel)
}

fn reason_parts(reason: &CancelReason) -> (&'static str, Option<&str>) {
    let kind = match reason {
        CancelReason::Peer { .. } => "peer",
        CancelReason::Timeout => "timeout",
        CancelReason::Disconnect => "disconnect",
        CancelReason::Shutdown => "shutdown",
        CancelReason::Parent => "parent",
        // `Local`, and whatever a later core adds: this side's own decision.
        _ => "local",
    };
    (kind, reason.text())
}

fn reason_from(kind: &str, text: Option<&str>) -> Result<CancelReason, Malformed> {
    let text = text.map(str::to_owned);
    Ok(match kind {
        "peer" => CancelReason::peer(text),
        "timeout" => CancelReason::Timeout,
        "disconnect" => CancelReason::Disconnect,
        "shutdown" => CancelReason::Shutdown,
        "parent" => CancelReason::Parent,
        "local" => match text {
            Some(text) => CancelReason::local(text),
            None => CancelReason::Local { reason: None },
        },
        _ => return Err(Malformed("an unknown reason")),
    })
}

/// How long ago a cancel sent at `sent_at` was published, by the publisher's clock and ours (for logs; zero if the
/// clocks disagree).
pub(crate) fn age(sent_at: SystemTime, now: SystemTime) -> Duration {
    now.duration_since(sent_at).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(cancel: &RemoteCancel) -> RemoteCancel {
        let fields = to_fields(cancel);
        from_fields(fields.iter().map(|(k, v)| (*k, v.as_bytes()))).unwrap()
    }

    #[test]
    fn every_field_survives_the_trip() {
        let sent = RemoteCancel::new(
            "session:S",
            Id::String("abc".into()),
            CancelReason::peer(Some("user stopped it".into())),
            "replica-b",
        )
        .canceller(Some("alice".into()));
        let got = round_trip(&sent);
        let millis = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_millis();
        assert_eq!(millis(got.sent_at), millis(sent.sent_at));
        assert_eq!(
            (got.scope, got.id, got.reason, got.canceller, got.origin),
            (
                sent.scope,
                sent.id,
                sent.reason,
                sent.canceller,
                sent.origin
            )
        );
    }

    #[test]
    fn number_ids_and_every_reason_kind_survive() {
        for reason in [
            CancelReason::peer(None),
            CancelReason::Timeout,
            CancelReason::Disconnect,
            CancelReason::Shutdown,
            CancelReason::Parent,
            CancelReason::local("drained"),
        ] {
            let sent = RemoteCancel::new("k", Id::Number(-7), reason.clone(), "a");
            let got = round_trip(&sent);
            assert_eq!((got.id, got.reason), (Id::Number(-7), reason));
        }
    }

    #[test]
    fn a_malformed_entry_is_refused_with_why() {
        let good = [
            ("scope", &b"k"[..]),
            ("id", b"1"),
            ("reason", b"peer"),
            ("origin", b"a"),
            ("at", b"1"),
        ];
        assert!(from_fields(good).is_ok());
        let without = |name: &str| from_fields(good.into_iter().filter(|(k, _)| *k != name));
        assert_eq!(without("scope").unwrap_err(), Malformed("no scope"));
        assert_eq!(without("id").unwrap_err(), Malformed("no id"));
        assert_eq!(without("origin").unwrap_err(), Malformed("no origin"));
        let with = |name: &str, value: &'static [u8]| {
            from_fields(
                good.into_iter()
                    .map(move |(k, v)| (k, if k == name { value } else { v })),
            )
        };
        assert_eq!(
            with("id", b"{}").unwrap_err(),
            Malformed("the id is not a JSON-RPC id")
        );
        assert_eq!(
            with("reason", b"why").unwrap_err(),
            Malformed("an unknown reason")
        );
        assert_eq!(
            with("at", b"soon").unwrap_err(),
            Malformed("the time is not a number")
        );
        assert_eq!(
            with("scope", b"\xff").unwrap_err(),
            Malformed("a field is not UTF-8")
        );
    }
}
