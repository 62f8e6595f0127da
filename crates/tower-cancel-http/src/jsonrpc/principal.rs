//! Scopes by principal: the value an auth layer put in the HTTP request's extensions picks the scope.

use std::{fmt, hash::Hash, time::Duration};

use tower_cancel::{bus::Replica, Scope};

use crate::scopes::{Full, Scopes};

/// A principal's scope and the lease that keeps it while a request uses it.
pub(super) type Leased = (Scope, Box<dyn Send + Sync>);

/// The table of principals' scopes, with the principal's type erased.
pub(super) trait Principals: Send + Sync + 'static {
    /// The scope of the principal in `extensions`, if there is one.
    fn lease(&self, extensions: &http::Extensions) -> Option<Result<Leased, Full>>;
}

pub(super) struct PrincipalScopes<P> {
    scopes: Scopes<P, Scope>,
    // Makes a principal's scope: a plain one, or one attached to a replica under the principal's key.
    make: Box<dyn Fn(&P) -> Scope + Send + Sync>,
}

impl<P: Clone + Eq + Hash + Send + Sync + 'static> PrincipalScopes<P> {
    pub(super) fn new(linger: Duration, max: usize) -> Self {
        Self {
            scopes: Scopes::new(linger, max),
            make: Box::new(|_| Scope::new()),
        }
    }

    /// The same, each principal's scope attached to `replica` under the key `jsonrpc:principal:<principal>`.
    pub(super) fn on_replica(linger: Duration, max: usize, replica: Replica) -> Self
    where
        P: fmt::Display,
    {
        Self {
            scopes: Scopes::new(linger, max),
            make: Box::new(move |principal| {
                replica.scope_owned(
                    format!("jsonrpc:principal:{principal}"),
                    Some(principal.to_string()),
                    Scope::new(),
                )
            }),
        }
    }
}

impl<P: Clone + Eq + Hash + Send + Sync + 'static> Principals for PrincipalScopes<P> {
    fn lease(&self, extensions: &http::Extensions) -> Option<Result<Leased, Full>> {
        let principal = extensions.get::<P>()?;
        Some(
            self.scopes
                .lease_or_insert(principal.clone(), || (self.make)(principal))
                .map(|lease| ((*lease).clone(), Box::new(lease) as Box<dyn Send + Sync>)),
        )
    }
}
