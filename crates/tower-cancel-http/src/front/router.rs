//! The one entry point shape: every front end gives an axum `Router` of its endpoints, and takes authentication
//! as a tower layer the same way.

use std::convert::Infallible;

use axum::{extract::Request as HttpRequest, response::IntoResponse, routing::Route, Router};
use tower::Layer;
use tower_service::Service;

/// `guarded` behind `auth` (a route layer: it runs for these routes only, so a path of none of them is still 404
/// and not 401), merged with `open` (the endpoints a stranger may reach: RAP's discovery).
pub(crate) fn mount<L>(guarded: Router, open: Router, auth: L) -> Router
where
    L: Layer<Route> + Clone + Send + Sync + 'static,
    L::Service: Service<HttpRequest> + Clone + Send + Sync + 'static,
    <L::Service as Service<HttpRequest>>::Response: IntoResponse + 'static,
    <L::Service as Service<HttpRequest>>::Error: Into<Infallible> + 'static,
    <L::Service as Service<HttpRequest>>::Future: Send + 'static,
{
    guarded.route_layer(auth).merge(open)
}
