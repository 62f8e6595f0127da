use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{ready, Context, Poll},
};

use pin_project_lite::pin_project;
use serde_json::Value;

use super::render;
use crate::{
    dialect::Dialect,
    message::{Id, Response},
    outcome::BoxError,
    request::Request,
    scope::Connection,
};

pin_project! {
    /// Response future of [`ErrorMap`](super::ErrorMap).
    pub struct ResponseFuture<F, D> {
        #[pin]
        state: State<F>,
        subject: Subject,
        // The request's connection, where its scope speaks a dialect: that one renders the reply (else the
        // layer's). The connection rather than the dialect's shared handle: the same clone, but one word where the
        // handle takes two, in a future held for every request in flight.
        spoken: Option<Connection>,
        dialect: D,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Running { #[pin] inner: F },
        // The inner service failed readiness: this is the outcome, and the service was never called.
        Failed { error: Option<BoxError> },
    }
}

/// What a reply is about, kept while the request runs: only what rendering it needs. One value rather than an
/// id and a method side by side, so that a request held for long keeps the room of one of them.
pub(crate) enum Subject {
    /// A request: its reply names `id`.
    Request {
        id: Id,
        server_cancellable: bool,
        // Whether a group cancel is answered with a result (`Dialect::answers_group_cancel`).
        answers_group: bool,
    },
    /// A notification: never answered; its method is kept to log a failure.
    Notification { method: String },
    /// The reply was given.
    Answered,
}

impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Request {
                id,
                server_cancellable,
                answers_group,
            } => f
                .debug_struct("Request")
                .field("id", id)
                .field("server_cancellable", server_cancellable)
                .field("answers_group", answers_group)
                .finish(),
            Subject::Notification { method } => f
                .debug_struct("Notification")
                .field("method", method)
                .finish(),
            Subject::Answered => f.write_str("Answered"),
        }
    }
}

impl<F: Future, D> ResponseFuture<F, D> {
    pub(crate) fn new(inner: F, subject: Subject, spoken: Option<Connection>, dialect: D) -> Self {
        Self {
            state: State::Running { inner },
            subject,
            spoken,
            dialect,
        }
    }

    pub(crate) fn failed(
        error: BoxError,
        subject: Subject,
        spoken: Option<Connection>,
        dialect: D,
    ) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
            subject,
            spoken,
            dialect,
        }
    }
}

impl<F, D> fmt::Debug for ResponseFuture<F, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("subject", &self.subject)
            .field(
                "spoken",
                &self
                    .spoken
                    .as_ref()
                    .and_then(|connection| connection.scope().dialect())
                    .map(|dialect| dialect.name()),
            )
            .finish()
    }
}

impl<F, D, T, E> Future for ResponseFuture<F, D>
where
    F: Future<Output = Result<T, E>>,
    T: Into<Value>,
    E: Into<BoxError>,
    D: Dialect,
{
    type Output = Result<Option<Response>, std::convert::Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = match this.state.project() {
            StateProj::Running { inner } => {
                ready!(inner.poll(cx)).map(Into::into).map_err(Into::into)
            }
            StateProj::Failed { error } => Err(error.take().expect("polled after completion")),
        };
        let spoken = this.spoken.as_ref().and_then(|c| c.scope().dialect());
        Poll::Ready(Ok(this.subject.answer(
            outcome,
            spoken.map(|dialect| &**dialect),
            this.dialect,
        )))
    }
}

impl Subject {
    /// What the reply to `req` is about, and the request's connection where its scope speaks a dialect (the
    /// dialect the cancel layer below read the request in): the flags come from that dialect, else from `own`,
    /// the layer's. The error map keeps a clone of that connection to render the reply in its scope's dialect; the
    /// presets' future is handed the dialect as the request settles.
    pub(crate) fn of<'r, D: Dialect>(req: &'r Request, own: &D) -> (Self, Option<&'r Connection>) {
        let Some(id) = req.id() else {
            // The method is only kept for notifications, whose failures are logged (requests' failures are
            // answered).
            let method = req.method().to_owned();
            return (Subject::Notification { method }, None);
        };
        let spoken = req
            .connection()
            .and_then(|c| Some((c, c.scope().dialect()?)));
        let (connection, dialect): (_, &dyn Dialect) = match spoken {
            Some((connection, dialect)) => (Some(connection), &**dialect),
            None => (None, own),
        };
        let subject = Subject::Request {
            id: id.clone(),
            server_cancellable: dialect.is_server_cancellable(req.method()),
            answers_group: dialect.answers_group_cancel(req.method()),
        };
        (subject, connection)
    }

    /// The reply for `outcome` (`None` where there is none: a notification, a reply the dialect does not send),
    /// rendered in `spoken`, the dialect of the request's scope where it speaks one, else in `own`. Only a
    /// cancel's reply differs from one dialect to another, so `spoken` may be `None` for any other outcome.
    /// Once: the subject is `Answered` afterwards.
    pub(crate) fn answer<D: Dialect>(
        &mut self,
        outcome: Result<Value, BoxError>,
        spoken: Option<&dyn Dialect>,
        own: &D,
    ) -> Option<Response> {
        match std::mem::replace(self, Subject::Answered) {
            Subject::Request {
                id,
                server_cancellable,
                answers_group,
            } => match spoken {
                Some(dialect) => render(id, outcome, server_cancellable, answers_group, dialect),
                None => render(id, outcome, server_cancellable, answers_group, own),
            },
            Subject::Notification { method } => {
                if let Err(error) = outcome {
                    tracing::warn!(method, %error, "notification handler failed");
                }
                None
            }
            Subject::Answered => panic!("polled after completion"),
        }
    }
}
