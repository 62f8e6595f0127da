//! The W3C trace context a dialect carries in a request's `params._meta` ([`Dialect::carries_trace_context`]):
//! read from the requests this side serves, written into the ones it sends. Only with the `opentelemetry`
//! feature; without it both are no-ops the compiler removes.
//!
//! The application's global propagator ([`opentelemetry::global::set_text_map_propagator`]) reads and writes the
//! keys (W3C `traceparent`/`tracestate`, `baggage`, or a composite of its choice), so this crate names none.

use serde_json::Value;
use tracing::Span;

use crate::{dialect::Dialect, message::WireRequest};

/// Make `span`, the span of the request `request` that has just arrived, a child of the trace context the request
/// carries, if its dialect carries one and it does. Called before the span is first entered. A span no subscriber
/// enabled is left alone, so that requests nobody traces are not read twice.
#[cfg_attr(not(feature = "opentelemetry"), allow(unused_variables))]
#[inline]
pub(crate) fn adopt_incoming<X: Dialect + ?Sized>(dialect: &X, span: &Span, request: &WireRequest) {
    #[cfg(feature = "opentelemetry")]
    if dialect.carries_trace_context() && !span.is_disabled() {
        otel::adopt_incoming(span, request);
    }
}

/// The fields of the current span's trace context to write into the `_meta` of a request this side sends, if the
/// dialect carries one and there is a span to carry (`None` without the `opentelemetry` feature).
#[cfg_attr(not(feature = "opentelemetry"), allow(unused_variables))]
#[inline]
pub(crate) fn outgoing(dialect: &dyn Dialect) -> Option<Vec<(String, String)>> {
    #[cfg(feature = "opentelemetry")]
    if dialect.carries_trace_context() {
        return otel::current_context_fields();
    }
    None
}

/// Write `fields` (from [`outgoing`]) into `params._meta`. Params that cannot carry them (neither an object nor
/// `null`, or a `_meta` that is not an object) are sent as they are.
pub(crate) fn write_outgoing(params: &mut Value, fields: Vec<(String, String)>) {
    if let Some(meta) = crate::dialect::meta::meta_object(params) {
        for (key, value) in fields {
            meta.insert(key, Value::String(value));
        }
    }
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::{
        global,
        propagation::{Extractor, Injector},
        trace::TraceContextExt,
    };
    use serde::Deserialize;
    use serde_json::{Map, Value};
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use crate::message::WireRequest;

    /// Only `_meta` of the params is read; the rest is skipped without being kept.
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Map<String, Value>>,
    }

    /// A `_meta` object as the propagator reads it: its string values.
    struct MetaExtractor<'a>(&'a Map<String, Value>);

    impl Extractor for MetaExtractor<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(Value::as_str)
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }

    /// The fields the propagator writes, empty ones left out (the W3C propagator writes an empty `tracestate`).
    #[derive(Default)]
    struct Fields(Vec<(String, String)>);

    impl Injector for Fields {
        fn set(&mut self, key: &str, value: String) {
            if !value.is_empty() {
                self.0.push((key.to_owned(), value));
            }
        }
    }

    pub(super) fn adopt_incoming(span: &Span, request: &WireRequest) {
        let Some(params) = request.params() else {
            return;
        };
        // Params that are not an object (an array, a malformed `_meta`) carry no context: the span stays where
        // the subscriber put it.
        let Ok(Params { meta: Some(meta) }) = serde_json::from_str::<Params>(params.get()) else {
            return;
        };
        let context = global::get_text_map_propagator(|p| p.extract(&MetaExtractor(&meta)));
        // Without a valid remote span the span keeps its place under the current one (an empty context as its
        // parent would make it a root).
        if !context.span().span_context().is_valid() {
            return;
        }
        if let Err(error) = span.set_parent(context) {
            // No OpenTelemetry layer under the subscriber: there is no trace to join.
            tracing::trace!(%error, "the request's trace context is not used");
        }
    }

    pub(super) fn current_context_fields() -> Option<Vec<(String, String)>> {
        let span = Span::current();
        if span.is_disabled() {
            return None;
        }
        let context = span.context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut fields = Fields::default();
        global::get_text_map_propagator(|p| p.inject_context(&context, &mut fields));
        (!fields.0.is_empty()).then_some(fields.0)
    }
}
