use tower_layer::Layer;

use super::ErrorMap;

/// Turns every outcome of the inner service into the dialect's wire reply. See the [module docs](crate::error_map).
#[derive(Clone, Debug)]
pub struct ErrorMapLayer<D> {
    dialect: D,
}

impl<D> ErrorMapLayer<D> {
    /// An error-mapping layer for `dialect`.
    pub const fn new(dialect: D) -> Self {
        Self { dialect }
    }
}

impl<S, D: Clone> Layer<S> for ErrorMapLayer<D> {
    type Service = ErrorMap<S, D>;

    fn layer(&self, inner: S) -> Self::Service {
        ErrorMap::new(inner, self.dialect.clone())
    }
}
