use std::{collections::HashMap, sync::Arc, time::Duration};

use tower_layer::Layer;

use super::{expiry::Expiry, Timeout};

/// Gives every request a deadline. See the [module docs](crate::timeout).
#[derive(Clone, Debug, Default)]
pub struct TimeoutLayer {
    config: Arc<Config>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Config {
    pub(crate) default: Option<Duration>,
    pub(crate) per_method: HashMap<String, Duration>,
    pub(crate) meta_field: Option<Arc<str>>,
    pub(crate) max_total: Option<Duration>,
    // The deadlines of the requests this layer gave one, shared by every service it made.
    pub(crate) expiry: Expiry,
}

impl Config {
    /// Whether any request can get a deadline from this layer.
    pub(crate) fn has_rules(&self) -> bool {
        self.default.is_some() || !self.per_method.is_empty() || self.meta_field.is_some()
    }
}

impl TimeoutLayer {
    /// Requests time out after `timeout`, unless a per-method or per-request timeout says otherwise.
    pub fn new(timeout: Duration) -> Self {
        Self::none().default_timeout(Some(timeout))
    }

    /// No default timeout: only requests with a per-method or per-request timeout get a deadline.
    pub fn none() -> Self {
        Self::default()
    }

    /// Set (or, with `None`, remove) the default timeout.
    pub fn default_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.config_mut().default = timeout;
        self
    }

    /// Requests of `method` time out after `timeout`.
    pub fn method(mut self, method: impl Into<String>, timeout: Duration) -> Self {
        self.config_mut().per_method.insert(method.into(), timeout);
        self
    }

    /// Read a per-request timeout, in milliseconds, from `params._meta.<field>` (for example `"timeoutMs"`). A
    /// request's own timeout applies where it is shorter than its method's or the default one (a peer cannot
    /// extend the server's limits); with neither, it applies as it is. Reading it parses the params, so this costs
    /// a little on every request.
    ///
    /// The requests a handler sends on through its request's [`Peer`](crate::Peer) carry the time that is left
    /// in the same field, for the next hop's layer (see [crate docs](crate#deadlines-across-hops)).
    pub fn from_meta(mut self, field: impl Into<String>) -> Self {
        let field: String = field.into();
        self.config_mut().meta_field = Some(Arc::from(field));
        self
    }

    /// Make the timeout an idle timeout: each progress report (or
    /// [`RequestContext::touch`](crate::RequestContext::touch)) pushes the deadline back to a full timeout from
    /// now, but a request never runs longer than `max_total` in all (MCP's reset-on-progress with a maximum).
    pub fn reset_on_progress(mut self, max_total: Duration) -> Self {
        self.config_mut().max_total = Some(max_total);
        self
    }

    #[cfg(test)]
    pub(crate) fn expiry(&self) -> &Expiry {
        &self.config.expiry
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeout::new(inner, self.config.clone())
    }
}
