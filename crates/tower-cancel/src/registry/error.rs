use std::fmt;

use crate::message::Id;

/// A request id that is already in flight on the same connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DuplicateId(pub Id);

impl fmt::Display for DuplicateId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request id {} is already in flight", self.0)
    }
}

impl std::error::Error for DuplicateId {}
