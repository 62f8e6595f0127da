//! The one way a front end is built: its service, and what its clones share (the skeleton's [`State`], the
//! [`Settings`] every front end has, its protocol's own configuration), configured before it is first cloned.

use std::{sync::Arc, time::Duration};

use axum::body::Body;
use bytes::Bytes;
use tower_cancel::{bus::Replica, Scope};

use super::{
    limits::{
        DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_IN_FLIGHT,
        DEFAULT_MAX_IN_FLIGHT_PER_SCOPE,
    },
    quota::Quota,
    state::State,
    Core, Front,
};
use crate::body::{self, Refused};

/// What a front end's protocol adds to the skeleton's shutdown.
pub(crate) trait Protocol: Send + Sync + 'static {
    /// Called once by the shutdown, after every open link was closed with reason `Shutdown`: end what else the
    /// front end keeps (MCP's sessions).
    fn shut_down(&self) {}
}

impl Protocol for () {}

/// The settings every front end has.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The largest body (or WebSocket message) read.
    pub(crate) max_body_bytes: usize,
    /// How long a body may take to arrive.
    pub(crate) body_timeout: Duration,
    /// Set when the server is one replica of several: scopes kept under a shared key are attached to it.
    pub(crate) replica: Option<Replica>,
    /// The most requests running at once, over every client.
    pub(crate) max_in_flight: usize,
    /// The most requests one scope (a session, a principal, a thread) runs at once.
    pub(crate) max_in_flight_per_scope: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            replica: None,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_in_flight_per_scope: DEFAULT_MAX_IN_FLIGHT_PER_SCOPE,
        }
    }
}

impl Settings {
    /// `scope` attached to the replica under `key` (every replica gives the same scope the same key), so that a
    /// cancel that finds nothing here reaches the other replicas; `owner` names who the scope's cancels come from.
    /// `scope` itself when the server is not one replica of several.
    pub(crate) fn attach(
        &self,
        key: impl FnOnce() -> String,
        owner: Option<String>,
        scope: Scope,
    ) -> Scope {
        match &self.replica {
            Some(replica) => replica.scope_owned(key(), owner, scope),
            None => scope,
        }
    }

    /// A count of one scope's requests, bounded by `max_in_flight_per_scope`.
    pub(crate) fn scope_quota(&self) -> Quota {
        Quota::new(self.max_in_flight_per_scope)
    }
}

/// What every front end's clones share, behind one `Arc`.
pub(crate) struct Shared<C> {
    name: &'static str,
    pub(crate) state: State,
    pub(crate) settings: Settings,
    pub(crate) protocol: C,
}

impl<C: Protocol> Core for Shared<C> {
    fn state(&self) -> &State {
        &self.state
    }

    fn shut_down(&self) {
        self.protocol.shut_down();
    }
}

/// A front end: the service it serves, and what its clones share.
pub(crate) struct Endpoint<S, C> {
    pub(crate) service: S,
    shared: Arc<Shared<C>>,
}

impl<S, C: Protocol> Endpoint<S, C> {
    /// The front end called `name` (for its panics), serving `service` under `protocol`'s configuration.
    pub(crate) fn new(name: &'static str, service: S, settings: Settings, protocol: C) -> Self {
        Self {
            service,
            shared: Arc::new(Shared {
                name,
                state: State::new(Quota::new(settings.max_in_flight)),
                settings,
                protocol,
            }),
        }
    }

    /// Change the configuration, which the clones share: only before the first clone (mounting it in a router
    /// clones it, and so does [`front`](Self::front)), since a clone serving already must not see it change.
    pub(crate) fn configure(mut self, change: impl FnOnce(&mut Settings, &mut C)) -> Self {
        let Some(shared) = Arc::get_mut(&mut self.shared) else {
            panic!(
                "configure a {} before it is cloned (to serve it, or for its Front)",
                self.shared.name
            )
        };
        change(&mut shared.settings, &mut shared.protocol);
        // Nothing runs yet (nothing could reach an endpoint that is not cloned): the count starts anew.
        shared.state.running = Quota::new(shared.settings.max_in_flight);
        self
    }

    /// The skeleton's handle on this front end.
    pub(crate) fn front(&self) -> Front {
        Front {
            core: self.shared.clone(),
        }
    }
}

impl<S, C> Endpoint<S, C> {
    pub(crate) fn state(&self) -> &State {
        &self.shared.state
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    pub(crate) fn protocol(&self) -> &C {
        &self.shared.protocol
    }

    /// Read a request's body, at most [`Settings::max_body_bytes`] of it (413 past it), within
    /// [`Settings::body_timeout`] (408 past it).
    pub(crate) async fn read_body(&self, body: Body) -> Result<Bytes, Refused> {
        let settings = &self.shared.settings;
        body::read(body, settings.max_body_bytes, settings.body_timeout).await
    }
}

impl<S: Clone, C> Clone for Endpoint<S, C> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            shared: self.shared.clone(),
        }
    }
}
