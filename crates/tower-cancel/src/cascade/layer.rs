use tower_layer::Layer;

use super::Cascade;

/// Gives each request a [`Peer`](crate::Peer) whose requests are children of it. See the
/// [module docs](crate::cascade).
#[derive(Clone, Copy, Debug, Default)]
pub struct CascadeLayer {
    _priv: (),
}

impl CascadeLayer {
    /// A cascade layer.
    pub const fn new() -> Self {
        Self { _priv: () }
    }
}

impl<S> Layer<S> for CascadeLayer {
    type Service = Cascade<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Cascade::new(inner)
    }
}
