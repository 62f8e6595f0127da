use http::Extensions;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    params_object, recognize_cancel, request_cancelled, CancelNotice, CancelledReply, Dialect,
    GroupCancel, Recognized, ServerCancellable,
};
use crate::{
    message::{code, ErrorObject, Id, WireRequest},
    progress_update::{ProgressEvent, ProgressUpdate},
    reason::CancelReason,
    session::SessionState,
};

/// The Language Server Protocol: `$/cancelRequest {"id": …}`, answered with -32800.
///
/// Either side may send it; a cancel for an unknown or completed request is ignored. `initialize` is never
/// cancellable. The caller keeps waiting for the reply after it cancelled (vscode-jsonrpc's behaviour).
///
/// Internal cancellation (a timeout, a shutdown) is answered the same way, with -32800, except for request types
/// that opted in to LSP 3.17's ServerCancelled: see [`Lsp::server_cancellable`].
///
/// Progress: a request with a `workDoneToken` can report `$/progress` (`begin` on the first report, then
/// `report`, and `end` when the handler drops its [`Progress`](crate::progress::Progress)).
///
/// Server-initiated progress: a handler may create a token on the client (`window/workDoneProgress/create`,
/// [`Request::create_progress`](crate::Request::create_progress) or its own request through its child peer). The
/// client's `window/workDoneProgress/cancel {token}` cancels the request that created it, with reason
/// [`CancelReason::Peer`] (-32800), and is passed on to the service, as is one for an unknown token (which cancels
/// nothing) or with malformed params.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lsp;

impl Lsp {
    /// The method of LSP's cancel notification.
    pub const CANCEL_METHOD: &'static str = "$/cancelRequest";

    /// The method of the server's request that creates a progress token on the client.
    pub const CREATE_PROGRESS_METHOD: &'static str = "window/workDoneProgress/create";

    /// The method of the client's notification that cancels the work under a progress token the server created.
    pub const CANCEL_PROGRESS_METHOD: &'static str = "window/workDoneProgress/cancel";
}

impl Lsp {
    /// The same dialect, answering -32802 ServerCancelled instead of -32800 when this side cancels a request of
    /// one of `methods` (a timeout, a shutdown), as LSP 3.17 allows for request types that opt in (pull
    /// diagnostics: `textDocument/diagnostic`, `workspace/diagnostic`). The error's data is
    /// `{"retriggerRequest": true}` for a timeout (the client may ask again) and `false` otherwise.
    pub fn server_cancellable<I, M>(self, methods: I) -> ServerCancellable<Lsp>
    where
        I: IntoIterator<Item = M>,
        M: Into<String>,
    {
        ServerCancellable::new(self, methods)
    }
}

#[derive(Deserialize)]
struct Params {
    id: Id,
}

/// The params of `window/workDoneProgress/create` and `window/workDoneProgress/cancel`: a `ProgressToken` is an
/// integer or a string, as an [`Id`].
#[derive(Deserialize)]
struct TokenParams {
    token: Id,
}

#[derive(Deserialize)]
struct WorkDone {
    #[serde(rename = "workDoneToken")]
    token: Option<Value>,
}

impl Dialect for Lsp {
    fn name(&self) -> &'static str {
        "lsp"
    }

    fn recognize(&self, notification: &WireRequest, _session: &SessionState) -> Recognized {
        if notification.method() == Self::CANCEL_PROGRESS_METHOD {
            return recognize_progress_cancel(notification);
        }
        recognize_cancel(notification, Self::CANCEL_METHOD, |p: Params| {
            CancelNotice {
                id: p.id,
                reason: None,
            }
        })
    }

    fn is_cancellable(&self, method: &str, _session: &SessionState) -> bool {
        method != "initialize"
    }

    fn cancelled_reply(&self, reason: &CancelReason, server_cancellable: bool) -> CancelledReply {
        let by_this_side = !matches!(
            reason,
            CancelReason::Peer { .. } | CancelReason::Group { .. }
        );
        if server_cancellable && by_this_side {
            let retrigger = matches!(reason, CancelReason::Timeout);
            return CancelledReply::Error(
                ErrorObject::new(code::SERVER_CANCELLED, "Server cancelled the request")
                    .with_data(json!({ "retriggerRequest": retrigger })),
            );
        }
        request_cancelled("Request cancelled")
    }

    fn progress_token(&self, request: &WireRequest, _extensions: &Extensions) -> Option<Value> {
        let token = request.params_as::<WorkDone>().ok()?.token?;
        (token.is_string() || token.is_i64()).then_some(token)
    }

    fn progress_notification(
        &self,
        token: &Value,
        event: ProgressEvent<'_>,
    ) -> Option<WireRequest> {
        let value = match event {
            ProgressEvent::Report {
                first: true,
                update,
                cancellable,
            } => {
                // `begin` needs a title: the first report's message is it.
                let title = update.message.as_deref().unwrap_or("Working");
                let mut value = json!({ "kind": "begin", "title": title });
                if cancellable {
                    // Only for a token this side created: VS Code shows a cancel button for it.
                    value["cancellable"] = json!(true);
                }
                if let Some(percentage) = update.percentage() {
                    value["percentage"] = json!(percentage);
                }
                value
            }
            ProgressEvent::Report { update, .. } => {
                let mut value = json!({ "kind": "report" });
                if let Some(message) = &update.message {
                    value["message"] = json!(message);
                }
                if let Some(percentage) = update.percentage() {
                    value["percentage"] = json!(percentage);
                }
                value
            }
            ProgressEvent::End => json!({ "kind": "end" }),
        };
        Some(WireRequest::notification(
            "$/progress",
            json!({ "token": token, "value": value }),
        ))
    }

    fn read_progress(&self, notification: &WireRequest) -> Option<(Value, ProgressUpdate)> {
        if notification.method() != "$/progress" {
            return None;
        }
        let params: Value = notification.params_as().ok()?;
        let value = &params["value"];
        let update = ProgressUpdate {
            progress: value["percentage"].as_f64().unwrap_or(0.0),
            total: value["percentage"].is_number().then_some(100.0),
            message: value["message"]
                .as_str()
                .or(value["title"].as_str())
                .map(str::to_owned),
        };
        Some((params["token"].clone(), update))
    }

    fn attach_progress_token(&self, params: &mut Value, token: &Value) -> bool {
        match params_object(params) {
            Some(params) => {
                params.insert("workDoneToken".into(), token.clone());
                true
            }
            None => false,
        }
    }

    fn cancel_message(&self, id: &Id, _reason: &CancelReason) -> WireRequest {
        WireRequest::notification(Self::CANCEL_METHOD, json!({ "id": id }))
    }

    fn progress_created(&self, outgoing: &WireRequest) -> Option<Id> {
        if outgoing.method() != Self::CREATE_PROGRESS_METHOD {
            return None;
        }
        Some(outgoing.params_as::<TokenParams>().ok()?.token)
    }

    fn create_progress(&self, token: &Id) -> Option<(&'static str, Value)> {
        Some((Self::CREATE_PROGRESS_METHOD, json!({ "token": token })))
    }
}

/// `window/workDoneProgress/cancel {token}`: the request that created the token (bound by the handler's child
/// peer) is cancelled as by the client's `$/cancelRequest` (reason Peer: -32800). Unlike `$/cancelRequest` it is
/// passed on to the service, malformed or not: the token may be the application's own (background work).
fn recognize_progress_cancel(notification: &WireRequest) -> Recognized {
    match super::cancel_params::<TokenParams>(notification) {
        Some(TokenParams { token }) => Recognized::CancelGroup(GroupCancel {
            key: token,
            reason: CancelReason::peer(None),
        }),
        None => Recognized::NotACancel,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress_update::ProgressUpdate;

    fn value(event: ProgressEvent<'_>) -> Value {
        let notification = Lsp.progress_notification(&json!("t"), event).unwrap();
        assert_eq!(notification.method(), "$/progress");
        notification.params_as::<Value>().unwrap()["value"].clone()
    }

    #[test]
    fn progress_has_a_percentage_only_against_a_total() {
        let counted = ProgressUpdate::new(3.0).message("indexing");
        assert_eq!(
            value(ProgressEvent::Report {
                first: true,
                update: &counted,
                cancellable: false,
            }),
            json!({ "kind": "begin", "title": "indexing" })
        );
        assert_eq!(
            value(ProgressEvent::Report {
                first: false,
                update: &counted,
                cancellable: false,
            }),
            json!({ "kind": "report", "message": "indexing" })
        );
        let measured = ProgressUpdate::new(1.0).total(4.0);
        assert_eq!(
            value(ProgressEvent::Report {
                first: false,
                update: &measured,
                cancellable: false,
            }),
            json!({ "kind": "report", "percentage": 25 })
        );
        assert_eq!(value(ProgressEvent::End), json!({ "kind": "end" }));
    }

    #[test]
    fn a_created_tokens_begin_says_it_is_cancellable() {
        let update = ProgressUpdate::new(0.0).message("demo/progress");
        let begin = ProgressEvent::Report {
            first: true,
            update: &update,
            cancellable: true,
        };
        assert_eq!(
            value(begin),
            json!({ "kind": "begin", "title": "demo/progress", "cancellable": true })
        );
    }

    #[test]
    fn a_progress_cancel_cancels_the_group_of_its_token_and_anything_else_is_passed_on() {
        let session = SessionState::default();
        let cancel = |params: Value| {
            let notification = WireRequest::notification(Lsp::CANCEL_PROGRESS_METHOD, params);
            Lsp.recognize(&notification, &session)
        };
        let group = |key: Id| {
            Recognized::CancelGroup(GroupCancel {
                key,
                reason: CancelReason::peer(None),
            })
        };
        assert_eq!(cancel(json!({ "token": "tc-1" })), group(Id::from("tc-1")));
        assert_eq!(cancel(json!({ "token": 3 })), group(Id::Number(3)));
        for malformed in [
            json!({}),
            json!({ "token": [1] }),
            json!(["tc-1"]),
            json!(null),
        ] {
            assert_eq!(cancel(malformed), Recognized::NotACancel);
        }
        // The reply of a request it cancels: the peer's cancel's, -32800, even for a server-cancellable method.
        assert_eq!(
            Lsp.server_cancellable(["textDocument/diagnostic"])
                .cancelled_reply(&CancelReason::peer(None), true),
            request_cancelled("Request cancelled")
        );
    }

    #[test]
    fn create_names_the_token_it_creates() {
        let token = Id::from("tc-1");
        let (method, params) = Lsp.create_progress(&token).unwrap();
        let create = WireRequest::new(5, method, params);
        assert_eq!(create.method(), "window/workDoneProgress/create");
        assert_eq!(Lsp.progress_created(&create), Some(token));
        let numbered = WireRequest::new(6, method, json!({ "token": 9 }));
        assert_eq!(Lsp.progress_created(&numbered), Some(Id::Number(9)));
        // Another method, or a token of no token's shape, creates nothing.
        let other = WireRequest::new(7, "workspace/configuration", json!({ "token": "t" }));
        assert_eq!(Lsp.progress_created(&other), None);
        let bad = WireRequest::new(8, method, json!({ "token": [1] }));
        assert_eq!(Lsp.progress_created(&bad), None);
    }
}
