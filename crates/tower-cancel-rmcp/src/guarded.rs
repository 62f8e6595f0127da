//! The safety net around the handler: rmcp runs each request on a task of its own and never answers one whose
//! handler panicked, so the request would wait for nothing. A panic here is answered -32603 `handler panicked`,
//! as the stack answers a panic of its own handlers.

use std::{borrow::Cow, panic::AssertUnwindSafe};

use futures_util::FutureExt;
use rmcp::{
    model::{ClientNotification, ClientRequest, ProtocolVersion, ServerConfig, ServerResult},
    service::{NotificationContext, RequestContext, RoleServer},
    ErrorData,
};

/// `S`, its panics caught.
pub(crate) struct Guarded<S>(pub(crate) S);

impl<S: rmcp::Service<RoleServer>> rmcp::Service<RoleServer> for Guarded<S> {
    async fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let method = request.method().to_owned();
        match AssertUnwindSafe(self.0.handle_request(request, context))
            .catch_unwind()
            .await
        {
            Ok(result) => result,
            Err(_) => {
                tracing::error!(%method, "rmcp handler panicked");
                Err(ErrorData::internal_error("handler panicked", None))
            }
        }
    }

    async fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        AssertUnwindSafe(self.0.handle_notification(notification, context))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                tracing::error!("rmcp notification handler panicked");
                Ok(())
            })
    }

    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.0.supported_protocol_versions()
    }
}
