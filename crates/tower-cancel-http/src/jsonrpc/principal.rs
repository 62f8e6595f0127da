//! Scopes by principal: the value an auth layer put in the HTTP request's extensions picks the scope.

use std::{fmt, hash::Hash, time::Duration};

use tower_cancel::Scope;

use crate::{
    front::{Quota, Settings},
    scopes::{Full, Scoped, Scopes},
};

/// A principal's scope, the count of its requests in flight, and the lease that keeps them while a request
/// uses them.
pub(super) type Leased = (Scope, Quota, Box<dyn Send + Sync>);

/// What is kept per principal.
struct Principal {
    scope: Scope,
    // Bounded by the settings' `max_in_flight_per_scope`: one principal cannot take the whole endpoint's room.
    in_flight: Quota,
}

impl Scoped for Principal {
    fn scope(&self) -> &Scope {
        &self.scope
    }
}

/// The table of principals' scopes, with the principal's type erased.
pub(super) trait Principals: Send + Sync + 'static {
    /// The scope of the principal in `extensions`, if there is one; a new one is attached to the settings'
    /// replica when the principal can be named.
    fn lease(
        &self,
        extensions: &http::Extensions,
        settings: &Settings,
    ) -> Option<Result<Leased, Full>>;
}

pub(super) struct PrincipalScopes<P> {
    scopes: Scopes<P, Principal>,
    // How a principal is named in its scope's replica key and as its cancels' owner (its `Display`); none for a
    // principal that cannot be written, whose scope stays on this replica.
    name: Option<fn(&P) -> String>,
}

impl<P: Clone + Eq + Hash + Send + Sync + 'static> PrincipalScopes<P> {
    pub(super) fn new(linger: Duration, max: usize) -> Self {
        Self {
            scopes: Scopes::new(linger, max),
            name: None,
        }
    }

    /// The same, each principal's scope attached to the replica (if any) under the key
    /// `jsonrpc:principal:<principal>`.
    pub(super) fn named(linger: Duration, max: usize) -> Self
    where
        P: fmt::Display,
    {
        Self {
            scopes: Scopes::new(linger, max),
            name: Some(|principal| principal.to_string()),
        }
    }
}

impl<P: Clone + Eq + Hash + Send + Sync + 'static> Principals for PrincipalScopes<P> {
    fn lease(
        &self,
        extensions: &http::Extensions,
        settings: &Settings,
    ) -> Option<Result<Leased, Full>> {
        let principal = extensions.get::<P>()?;
        let make = || {
            let scope = match self.name {
                Some(name) => {
                    let name = name(principal);
                    let key = || format!("jsonrpc:principal:{name}");
                    settings.attach(key, Some(name.clone()), Scope::new())
                }
                None => Scope::new(),
            };
            Principal {
                scope,
                in_flight: settings.scope_quota(),
            }
        };
        Some(
            self.scopes
                .lease_or_insert(principal.clone(), make)
                .map(|lease| {
                    let (scope, quota) = (lease.scope.clone(), lease.in_flight.clone());
                    (scope, quota, Box::new(lease) as Box<dyn Send + Sync>)
                }),
        )
    }
}
