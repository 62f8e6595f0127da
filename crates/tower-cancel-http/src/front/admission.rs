//! Admitting a request: room in its front end's [`Quota`] and in its scope's, both or neither, before it runs.

use std::fmt;

use super::quota::{Busy, Permit, Permits, Quota};

/// Room taken for the requests of one message (one request, or a batch's), handed out one [`Admitted`] each.
/// What is not handed out is given back when this is dropped.
pub struct Admission {
    front: Permits,
    scope: Option<Permits>,
}

impl Admission {
    /// Room for `n` requests in `front` and, if given, in `scope`: all of it, or a refusal that took nothing.
    pub(crate) fn take(front: &Quota, scope: Option<&Quota>, n: usize) -> Result<Self, Busy> {
        // The scope's first: it is the smaller, and a refusal there must not touch the front end's count.
        let scope = scope.map(|scope| scope.try_take(n)).transpose()?;
        Ok(Self {
            front: front.try_take(n)?,
            scope,
        })
    }
}

impl Iterator for Admission {
    type Item = Admitted;

    fn next(&mut self) -> Option<Admitted> {
        let front = self.front.next()?;
        let scope = self.scope.as_mut().and_then(Iterator::next);
        Some(Admitted {
            _front: front,
            _scope: scope,
        })
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("left", &self.front.size_hint().0)
            .finish()
    }
}

/// One request's place in its front end's count and its scope's, held until its task ends.
pub struct Admitted {
    _front: Permit,
    _scope: Option<Permit>,
}

impl Admitted {
    /// A place counted in the front end's count without taking room in its bound (a notification's).
    pub(crate) fn counted(front: Permit) -> Self {
        Self {
            _front: front,
            _scope: None,
        }
    }
}

impl fmt::Debug for Admitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Admitted")
    }
}
