use std::time::Duration;

use tower_layer::Layer;

use super::{Cancel, GroupBy};
use crate::{dialect::Dialect, outbox::Outbox, registry::Registry, scope::Scope};

/// What happens to a handler when its request is cancelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// The handler's future is dropped at once, so every `.await` it was parked on stops. The default.
    #[default]
    Abort,
    /// The token fires and the handler may still answer within `grace`: a partial result (where the dialect
    /// allows one) or its own error. After `grace` it is dropped as in `Abort`.
    Cooperative {
        /// How long the handler may take to wind down.
        grace: Duration,
    },
}

/// Makes requests cancellable: consumes the dialect's cancel messages, registers each cancellable request in its
/// scope's [`Registry`], gives it a [`RequestContext`](crate::RequestContext) and races it against its token.
///
/// See the [module docs](crate::cancel) for the behaviour.
#[derive(Clone, Debug)]
pub struct CancelLayer<D> {
    dialect: D,
    mode: Mode,
    registry: Option<Registry>,
    group_by: Option<GroupBy>,
}

impl<D> CancelLayer<D> {
    /// A cancel layer for `dialect`, in [`Mode::Abort`].
    pub const fn new(dialect: D) -> Self {
        Self {
            dialect,
            mode: Mode::Abort,
            registry: None,
            group_by: None,
        }
    }

    /// Set the mode.
    pub const fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Cooperative mode with a grace period.
    pub const fn cooperative(self, grace: Duration) -> Self {
        self.mode(Mode::Cooperative { grace })
    }

    /// The registry for requests that arrive without a [`Connection`](crate::scope::Connection) (the layer used
    /// without a transport). By default each service built by this layer gets a new one.
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Put each cancellable request whose params have the member `param` (a string or an integer) in the group of
    /// that key on its connection, so that the peer's group cancel of that key (ACP's `session/cancel
    /// {sessionId}`: `group_by_param("sessionId")`) cancels it with
    /// [`CancelReason::Group`](crate::CancelReason::Group). Off by default: a layer that does not group reads no
    /// params. The handler finds its group in [`RequestContext::group`](crate::RequestContext::group).
    pub fn group_by_param(mut self, param: impl Into<std::sync::Arc<str>>) -> Self {
        self.group_by = Some(GroupBy::param(param));
        self
    }

    /// The grouping at admission, if set ([`group_by_param`](Self::group_by_param)).
    pub fn group_by(&self) -> Option<&GroupBy> {
        self.group_by.as_ref()
    }

    /// The dialect.
    pub fn dialect(&self) -> &D {
        &self.dialect
    }
}

impl<S, D: Dialect + Clone> Layer<S> for CancelLayer<D> {
    type Service = Cancel<S, D>;

    fn layer(&self, inner: S) -> Self::Service {
        // Nothing sends through the own connection's outbox: a request without a transport has no peer to tell.
        let scope = Scope::new().with_registry(self.registry.clone().unwrap_or_default());
        Cancel::new(
            inner,
            self.dialect.clone(),
            self.mode,
            scope.connect(Outbox::closed()),
        )
        .grouping(self.group_by.clone())
    }
}
