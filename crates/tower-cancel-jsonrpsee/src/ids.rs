//! jsonrpsee's request ids as ours.
//!
//! jsonrpsee reads an id as `null`, an unsigned number (`u64`) or a string; ours are a signed number (`i64`) or a
//! string, compared exactly (`1` and `"1"` differ, as they do for jsonrpsee). An id that has no counterpart (`null`,
//! or a number past `i64::MAX`) cannot be named by a cancel: such a call goes to jsonrpsee untouched.

use jsonrpsee::types::Id as TheirId;
use tower_cancel::Id;

/// Our id for jsonrpsee's `id`, or `None` where a cancel could never name it.
pub(crate) fn ours(id: &TheirId<'_>) -> Option<Id> {
    match id {
        TheirId::Number(number) => i64::try_from(*number).ok().map(Id::Number),
        TheirId::Str(text) => Some(Id::String(text.to_string())),
        TheirId::Null => None,
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use jsonrpsee::types::Id as TheirId;
    use tower_cancel::Id;

    use super::ours;

    #[test]
    fn numbers_and_strings_map_exactly_and_the_rest_passes_through() {
        assert_eq!(ours(&TheirId::Number(7)), Some(Id::Number(7)));
        assert_eq!(
            ours(&TheirId::Str(Cow::Borrowed("7"))),
            Some(Id::String("7".into()))
        );
        assert_eq!(
            ours(&TheirId::Number(i64::MAX as u64)),
            Some(Id::Number(i64::MAX))
        );
        assert_eq!(ours(&TheirId::Number(i64::MAX as u64 + 1)), None);
        assert_eq!(ours(&TheirId::Null), None);
    }
}
