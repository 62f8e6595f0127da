//! In-process cost of the layers: one call of a trivial service, bare and wrapped, without any connection.

use std::{future::Future, time::Duration};

use futures_util::{future, FutureExt};
use serde_json::{value::RawValue, Value};
use tower::{service_fn, Layer, Service};
use tower_cancel::{
    dialect::Lsp, BoxError, CancelLayer, CancelStack, CascadeLayer, ErrorMapLayer, Id, Request,
    Response, TimeoutLayer,
};

/// One way of serving a request: called with the request's id, it makes the request, calls the service and checks
/// that the answer came at once.
pub type Variant = Box<dyn FnMut(i64)>;

/// The variants measured, by name: the request alone, the bare service, each layer alone, the full stack.
pub fn variants() -> Vec<(&'static str, Variant)> {
    vec![
        ("making the request only", Box::new(|id| drop(request(id)))),
        ("bare service", variant(service_fn(bare))),
        (
            "CancelLayer alone",
            variant(CancelLayer::new(Lsp).layer(service_fn(trivial))),
        ),
        (
            "TimeoutLayer (30 s) alone",
            variant(TimeoutLayer::new(Duration::from_secs(30)).layer(service_fn(trivial))),
        ),
        (
            "CascadeLayer alone",
            variant(CascadeLayer::new().layer(service_fn(trivial))),
        ),
        (
            "ErrorMapLayer alone",
            variant(ErrorMapLayer::new(Lsp).layer(service_fn(trivial))),
        ),
        (
            "CancelStack::lsp() (full default stack)",
            variant(CancelStack::lsp().layer(service_fn(trivial))),
        ),
        (
            "CancelStack::lsp().timeout(30 s)",
            variant(
                CancelStack::lsp()
                    .timeout(Duration::from_secs(30))
                    .layer(service_fn(trivial)),
            ),
        ),
    ]
}

/// A request as the driver makes it from a frame: `bench/work` with small params.
pub fn request(id: i64) -> Request {
    let params = RawValue::from_string(r#"{"ms":0,"tag":1}"#.to_owned()).expect("valid JSON");
    Request::from_parts(Some(Id::Number(id)), "bench/work".to_owned(), Some(params))
}

fn trivial(_req: Request) -> future::Ready<Result<Value, BoxError>> {
    future::ready(Ok(Value::Bool(true)))
}

fn bare(req: Request) -> future::Ready<Result<Option<Response>, BoxError>> {
    future::ready(Ok(req
        .id()
        .cloned()
        .map(|id| Response::ok(id, Value::Bool(true)))))
}

fn variant<S>(mut service: S) -> Variant
where
    S: Service<Request> + 'static,
    S::Future: Future<Output = Result<S::Response, S::Error>>,
    S::Error: std::fmt::Debug,
{
    Box::new(move |id| {
        let call = service.call(request(id));
        let answer = call
            .now_or_never()
            .expect("a trivial service answers at once");
        std::hint::black_box(answer.expect("the trivial service succeeds"));
    })
}
