//! Grouping at admission: [`GroupBy`], which puts each cancellable request in the group named by one of its params
//! (ACP's `sessionId`), so that the peer's group cancel (`session/cancel`) reaches it.

use std::{fmt, sync::Arc};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::message::{Id, WireRequest};

/// Which param of a request names its group (see [`CancelLayer::group_by_param`](super::CancelLayer::group_by_param)).
///
/// A request whose params are an object with that member, a string or an integer, is in the group of that key on
/// its connection; any other request (no such member, or one of another type) is in none. The params are read
/// where they lie: nothing is allocated but the key a request is grouped by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBy {
    param: Arc<str>,
}

impl GroupBy {
    /// Group by the param `name` (ACP: `"sessionId"`).
    pub fn param(name: impl Into<Arc<str>>) -> Self {
        Self { param: name.into() }
    }

    /// The param a request's group is read from.
    pub fn name(&self) -> &str {
        &self.param
    }

    /// The group `request` is in, if any.
    pub(crate) fn key(&self, request: &WireRequest) -> Option<Id> {
        let raw = request.params()?.get();
        let mut reader = serde_json::Deserializer::from_str(raw);
        Member(&self.param).deserialize(&mut reader).ok().flatten()
    }
}

/// Reads the member of an object's that is named `.0`, skipping the others unread.
struct Member<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for Member<'_> {
    type Value = Option<Id>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        // `deserialize_map`, not `_any`: serde_json then refuses anything but an object, an array by position
        // included.
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Member<'_> {
    type Value = Option<Id>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(named) = map.next_key_seed(IsNamed(self.0))? {
            if named && found.is_none() {
                found = Some(map.next_value::<Id>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a key is `.0`, compared where it lies (an escaped key is compared once unescaped).
struct IsNamed<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for IsNamed<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for IsNamed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<bool, E> {
        Ok(name == self.0)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn key(params: serde_json::Value) -> Option<Id> {
        GroupBy::param("sessionId").key(&WireRequest::new(1, "session/prompt", params))
    }

    #[test]
    fn the_key_is_the_named_member_a_string_or_an_integer() {
        assert_eq!(
            key(json!({"prompt": [{"x": [1, 2]}], "sessionId": "s-1", "more": null})),
            Some(Id::from("s-1"))
        );
        assert_eq!(key(json!({"sessionId": 7})), Some(Id::from(7)));
        assert_eq!(
            key(json!({"session\u{49}d": "escaped"})),
            Some(Id::from("escaped"))
        );
    }

    #[test]
    fn anything_else_is_in_no_group() {
        assert_eq!(key(json!({"ms": 10})), None);
        assert_eq!(key(json!({"sessionId": {"nested": 1}})), None);
        assert_eq!(key(json!({"sessionId": null})), None);
        assert_eq!(key(json!({"sessionId": 1.5})), None);
        assert_eq!(key(json!(["s-1"])), None);
        assert_eq!(key(json!(null)), None);
        assert_eq!(
            GroupBy::param("sessionId").key(&WireRequest::new(1, "m", ())),
            None
        );
    }
}
