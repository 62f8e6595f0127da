//! The request envelope: a [`WireRequest`] with what the layers add to it (extensions, the [`Connection`] it
//! arrived on, its [`RequestContext`]), and how a connection makes one of each message it receives.
//!
//! The wire types ([`message`](crate::message)), the connection and the context stand below this file: it ties them
//! together, and the layers, which take and give requests, stand above it.

use std::{fmt, ops::Deref};

use http::Extensions;
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use crate::{
    context::RequestContext,
    message::{parse, Id, InvalidMessage, Parsed, Response, WireRequest},
    peer::Peer,
    scope::Connection,
};

/// An incoming request or notification (a notification has no id), as a handler gets it.
///
/// It dereferences to its [`WireRequest`]: [`id`](WireRequest::id), [`method`](WireRequest::method),
/// [`params`](WireRequest::params) and [`params_as`](WireRequest::params_as) are the message's. Handlers find the
/// request's [`RequestContext`] through [`Request::context`] once it has passed the cancel layer.
pub struct Request {
    wire: WireRequest,
    extensions: Extensions,
    // Fields rather than extensions: every request a transport reads has a connection and every request that
    // passes a cancel layer a context, and an extension would cost a map and a box per request.
    connection: Option<Connection>,
    context: Option<RequestContext>,
    // Set by a `CascadeLayer`: `peer()` gives the handler its connection's peer as a child of this request. A flag
    // rather than the child handle itself: most handlers never call the peer, and the handle is made when one does.
    child_peer: bool,
}

impl Request {
    /// A request with an id. `params` is serialized once, here.
    pub fn new(id: impl Into<Id>, method: impl Into<String>, params: impl Serialize) -> Self {
        WireRequest::new(id, method, params).into()
    }

    /// A notification (no id, never answered).
    pub fn notification(method: impl Into<String>, params: impl Serialize) -> Self {
        WireRequest::notification(method, params).into()
    }

    /// A request from its parts, params already raw.
    pub fn from_parts(id: Option<Id>, method: String, params: Option<Box<RawValue>>) -> Self {
        WireRequest::from_parts(id, method, params).into()
    }

    /// The message as it came off the wire (also what this request dereferences to).
    pub fn wire(&self) -> &WireRequest {
        &self.wire
    }

    /// The message, without the envelope.
    pub fn into_wire(self) -> WireRequest {
        self.wire
    }

    /// The request's extensions: transports and your own layers put their data here.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// Mutable access to the extensions.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// The connection the request arrived on, set by the transport ([`Connection::prepare`]): its scope, its
    /// outbox and its peer.
    pub fn connection(&self) -> Option<&Connection> {
        self.connection.as_ref()
    }

    /// The request's cancellation context, once the request has passed a [`CancelLayer`](crate::CancelLayer).
    pub fn context(&self) -> Option<&RequestContext> {
        self.context.as_ref()
    }

    pub(crate) fn set_context(&mut self, context: RequestContext) {
        self.context = Some(context);
    }

    /// The request's cancellation context, mutably: for layers of your own that act on it.
    pub fn context_mut(&mut self) -> Option<&mut RequestContext> {
        self.context.as_mut()
    }

    /// The connection's peer, as a child of this request: a request sent through it is cancelled (and the peer
    /// sent the cancel) when this request is cancelled, from any source. Given by a
    /// [`CascadeLayer`](crate::CascadeLayer) to a request that passed a [`CancelLayer`](crate::CancelLayer) and
    /// came over a connection that has a peer; `None` otherwise.
    ///
    /// A progress token that a request sent through it creates (LSP's `window/workDoneProgress/create`) is bound
    /// to this request: the peer's cancel of the token cancels it (see
    /// [`create_progress`](Self::create_progress)).
    pub fn peer(&self) -> Option<Peer> {
        if !self.child_peer {
            return None;
        }
        let lifecycle = self.context.as_ref()?.lifecycle();
        let connection = self.connection.as_ref()?;
        let peer = connection.peer()?;
        Some(
            peer.child_of_request(lifecycle.clone())
                .binding_progress_in(connection.registry().clone()),
        )
    }

    /// Let [`peer`](Self::peer) give the handler its connection's peer as a child of this request.
    pub(crate) fn give_child_peer(&mut self) {
        self.child_peer = true;
    }
}

impl From<WireRequest> for Request {
    fn from(wire: WireRequest) -> Self {
        Self {
            wire,
            extensions: Extensions::new(),
            connection: None,
            context: None,
            child_peer: false,
        }
    }
}

impl Deref for Request {
    type Target = WireRequest;

    fn deref(&self) -> &WireRequest {
        &self.wire
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("id", &self.wire.id())
            .field("method", &self.wire.method())
            .field("params", &self.wire.params())
            .field("extensions", &self.extensions)
            .field("connection", &self.connection)
            .field("context", &self.context)
            .finish()
    }
}

impl Serialize for Request {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.wire.serialize(serializer)
    }
}

/// Any message a peer can send.
#[derive(Debug)]
pub enum Message {
    /// A request or a notification.
    Request(Request),
    /// A reply to a request this side sent.
    Response(Response),
}

impl Message {
    /// Read one message from the bytes of a frame.
    ///
    /// A missing `jsonrpc` member is tolerated (some protocol texts omit it); any other value than `"2.0"` is not.
    /// Batches (JSON arrays) are not supported and get -32600.
    pub fn from_slice(bytes: &[u8]) -> Result<Message, InvalidMessage> {
        Ok(match parse(bytes)? {
            Parsed::Request(wire) => Message::Request(wire.into()),
            Parsed::Response(response) => Message::Response(response),
        })
    }
}

/// What [`Connection::receive`] made of a message.
#[derive(Debug)]
pub enum Incoming {
    /// A request or a notification for the service, prepared for the stack.
    Request(Request),
    /// A reply from the other side that no [`Peer`] claims (the scope has no dialect): the transport's to handle.
    Response(Response),
    /// A reply or a progress report about one of this side's own requests, handed to its [`Peer`].
    Consumed,
}

// Here rather than beside the rest of `Connection`: a connection is what a request carries, so the connection
// stands below the request, and what makes requests of messages stands with the request.
impl Connection {
    /// Take a message read from the other side: a request or a notification is prepared for the stack
    /// ([`prepare`](Self::prepare)) and handed back; a reply or a progress report about this side's own requests
    /// goes to the connection's [`Peer`].
    pub fn receive(&self, message: Message) -> Incoming {
        match message {
            Message::Response(response) => match self.peer() {
                Some(peer) => {
                    peer.dispatch_response(response);
                    Incoming::Consumed
                }
                None => Incoming::Response(response),
            },
            Message::Request(mut request) => {
                // A progress report for one of this side's calls, or the other side's cancel that ends one (an
                // MCP server tearing down a subscription), is the peer's; any other notification is the stack's.
                let peers = request.is_notification()
                    && self.peer().is_some_and(|peer| {
                        peer.dispatch_progress(&request)
                            || peer.dispatch_cancel_unless(&request, |id| self.serves(id))
                    });
                if peers {
                    return Incoming::Consumed;
                }
                self.prepare(&mut request);
                Incoming::Request(request)
            }
        }
    }

    /// Tie `request` to this connection, so that the layers find its scope, its outbox and its peer
    /// ([`Request::connection`]). A field of the request: it costs no allocation.
    pub fn prepare(&self, request: &mut Request) {
        request.connection = Some(self.clone());
    }
}
