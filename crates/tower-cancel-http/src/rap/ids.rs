//! Thread and tool-call ids are untrusted input (the spec says so): they are checked before they are used to
//! find anything, and an invalid one finds nothing.
//!
//! The ids real runtimes send are a model provider's tool-use ids (`toolu_01A09q90qw90lq917835lq9`,
//! `call_abc123`), UUIDs, and conversation keys a caller chose (a queue's message group id: letters, digits and
//! punctuation). So an id is printable ASCII without spaces, of at most [`MAX_ID_BYTES`]; and since a tool may
//! well use it in a path, it may not climb one: no `.` or `..` segment between slashes, no leading slash.
//! Anything else (a control character, whitespace, a byte beyond ASCII, `../etc`, a megabyte) is refused.

use std::fmt;

/// The longest id accepted, in bytes (the crate's one bound on a peer's ids).
pub use crate::front::MAX_ID_BYTES;

/// Why an id was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalidId {
    /// The empty string.
    Empty,
    /// Longer than [`MAX_ID_BYTES`].
    TooLong(usize),
    /// A character that is not printable ASCII, or a space.
    Character(char),
    /// A path that climbs or starts at the root: a `.` or `..` segment, or a leading `/` or `\\`.
    Path,
}

impl fmt::Display for InvalidId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidId::Empty => f.write_str("the id is empty"),
            InvalidId::TooLong(len) => write!(f, "the id is {len} bytes (at most {MAX_ID_BYTES})"),
            InvalidId::Character(c) => write!(
                f,
                "the id has the character {:?}",
                c.escape_debug().to_string()
            ),
            InvalidId::Path => f.write_str("the id is a path that climbs or starts at the root"),
        }
    }
}

impl std::error::Error for InvalidId {}

/// Check an id (a `thread_id`/`group_id` or a `tool_call_id`/`id`).
pub fn validate(id: &str) -> Result<(), InvalidId> {
    if id.is_empty() {
        return Err(InvalidId::Empty);
    }
    if id.len() > MAX_ID_BYTES {
        return Err(InvalidId::TooLong(id.len()));
    }
    if let Some(bad) = id.chars().find(|&c| !allowed(c)) {
        return Err(InvalidId::Character(bad));
    }
    let climbs = id
        .split(['/', '\\'])
        .any(|segment| segment == "." || segment == "..");
    if climbs || id.starts_with(['/', '\\']) {
        return Err(InvalidId::Path);
    }
    Ok(())
}

fn allowed(c: char) -> bool {
    c.is_ascii_graphic()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_real_runtimes_pass() {
        for id in [
            "toolu_01A09q90qw90lq917835lq9",
            "call_abc123",
            "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q",
            "6f1c2a9e-3b7d-4c1e-9f0a-2d8e4b6c1a3f",
            "thread_xyz",
            "user/42",
            "conversation#7_(retry)",
            "a..b",
            "a",
        ] {
            assert_eq!(validate(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn paths_controls_and_oversized_ids_are_refused() {
        assert_eq!(validate(""), Err(InvalidId::Empty));
        assert_eq!(validate("../etc/passwd"), Err(InvalidId::Path));
        assert_eq!(validate("a/../../b"), Err(InvalidId::Path));
        assert_eq!(validate("..\\b"), Err(InvalidId::Path));
        assert_eq!(validate(".."), Err(InvalidId::Path));
        assert_eq!(validate("."), Err(InvalidId::Path));
        assert_eq!(validate("/etc"), Err(InvalidId::Path));
        assert_eq!(validate("call\n1"), Err(InvalidId::Character('\n')));
        assert_eq!(validate("call\u{0}"), Err(InvalidId::Character('\u{0}')));
        assert_eq!(validate("call 1"), Err(InvalidId::Character(' ')));
        assert_eq!(validate("câll"), Err(InvalidId::Character('â')));
        let long = "a".repeat(MAX_ID_BYTES + 1);
        assert_eq!(validate(&long), Err(InvalidId::TooLong(MAX_ID_BYTES + 1)));
        assert_eq!(validate(&"a".repeat(MAX_ID_BYTES)), Ok(()));
    }
}
