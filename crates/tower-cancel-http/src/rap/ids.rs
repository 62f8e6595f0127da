//! Thread and tool-call ids are untrusted input (the spec says so): they are checked before they are used to
//! find anything, and an invalid one finds nothing.
//!
//! The ids real runtimes send are a model provider's tool-use ids (`toolu_01A09q90qw90lq917835lq9`,
//! `call_abc123`, `tooluse_kZJMlvQmRJ6eAyJE5GIl7Q`) and UUIDs: short runs of ASCII letters, digits and a few
//! separators. Anything else (a path such as `../etc`, a control character, whitespace, quotes, a megabyte) is
//! refused.

use std::fmt;

/// The longest id accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Why an id was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalidId {
    /// The empty string.
    Empty,
    /// Longer than [`MAX_ID_BYTES`].
    TooLong(usize),
    /// A byte outside ASCII letters, digits and `-_.:@+=`.
    Character(char),
    /// Only dots (`.` and `..` name directories).
    Dots,
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
            InvalidId::Dots => f.write_str("the id is only dots"),
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
    if id.bytes().all(|byte| byte == b'.') {
        return Err(InvalidId::Dots);
    }
    Ok(())
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '@' | '+' | '=')
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
            "a",
        ] {
            assert_eq!(validate(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn paths_controls_and_oversized_ids_are_refused() {
        assert_eq!(validate(""), Err(InvalidId::Empty));
        assert_eq!(validate("../etc/passwd"), Err(InvalidId::Character('/')));
        assert_eq!(validate(".."), Err(InvalidId::Dots));
        assert_eq!(validate("a\\b"), Err(InvalidId::Character('\\')));
        assert_eq!(validate("call\n1"), Err(InvalidId::Character('\n')));
        assert_eq!(validate("call\u{0}"), Err(InvalidId::Character('\u{0}')));
        assert_eq!(validate("call 1"), Err(InvalidId::Character(' ')));
        assert_eq!(validate("câll"), Err(InvalidId::Character('â')));
        let long = "a".repeat(MAX_ID_BYTES + 1);
        assert_eq!(validate(&long), Err(InvalidId::TooLong(MAX_ID_BYTES + 1)));
        assert_eq!(validate(&"a".repeat(MAX_ID_BYTES)), Ok(()));
    }
}
