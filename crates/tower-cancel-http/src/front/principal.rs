//! Scopes by principal: the value an auth layer put in the HTTP request's extensions picks the scope.

use std::{fmt, hash::Hash, time::Duration};

use tower_cancel::{bus::Replica, Scope};

use super::{limits::DEFAULT_PRINCIPAL_LINGER, Quota, Settings};
use crate::scopes::{Full, Scoped, Scopes};

/// A principal's scope, the count of its requests in flight, and the lease that keeps them while a request
/// uses them.
pub(crate) type Leased = (Scope, Quota, Box<dyn Send + Sync>);

/// How many principals' scopes are kept at most, by default.
const DEFAULT_MAX_PRINCIPALS: usize = 100_000;

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
pub(crate) trait Principals: Send + Sync + 'static {
    /// The scope of the principal in `extensions`, if there is one; a new one is attached to the settings'
    /// replica when the principal can be named.
    fn lease(
        &self,
        extensions: &http::Extensions,
        settings: &Settings,
    ) -> Option<Result<Leased, Full>>;
}

pub(crate) struct PrincipalScopes<P> {
    scopes: Scopes<P, Principal>,
    // How a principal is named in its scope's replica key and as its cancels' owner (its `Display`); none for a
    // principal that cannot be written, whose scope stays on this replica.
    name: Option<fn(&P) -> String>,
}

impl<P: Clone + Eq + Hash + Send + Sync + 'static> PrincipalScopes<P> {
    pub(crate) fn new(linger: Duration, max: usize) -> Self {
        Self {
            scopes: Scopes::new(linger, max),
            name: None,
        }
    }

    /// The same, each principal's scope attached to the replica (if any) under the key
    /// `jsonrpc:principal:<principal>`.
    pub(crate) fn named(linger: Duration, max: usize) -> Self
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

/// Scopes by principal for a front end built outside this crate (another framework's server), as
/// [`JsonRpc::scope_by_principal`](crate::JsonRpc::scope_by_principal) keeps them: the requests whose HTTP request
/// carries the same principal `P` in its extensions (put there by an auth layer) share a scope, kept for
/// [`DEFAULT_PRINCIPAL_LINGER`] after its last request, so that a cancel sent on one connection reaches the
/// principal's request of that id on another; each principal's requests in flight are bounded
/// ([`DEFAULT_MAX_IN_FLIGHT_PER_SCOPE`](super::DEFAULT_MAX_IN_FLIGHT_PER_SCOPE)).
pub struct ScopesByPrincipal {
    principals: Box<dyn Principals>,
    settings: Settings,
}

impl ScopesByPrincipal {
    /// Scopes by the principal `P`, on this server alone.
    pub fn new<P>() -> Self
    where
        P: Clone + Eq + Hash + Send + Sync + 'static,
    {
        Self {
            principals: Box::new(PrincipalScopes::<P>::new(
                DEFAULT_PRINCIPAL_LINGER,
                DEFAULT_MAX_PRINCIPALS,
            )),
            settings: Settings::default(),
        }
    }

    /// Scopes by the principal `P`, as one replica of several sharing `replica`'s bus: each principal's scope is
    /// attached under the key `jsonrpc:principal:<principal>` (its `Display`; the key
    /// [`JsonRpc::scope_by_principal_on`](crate::JsonRpc::scope_by_principal_on) uses too), so that a cancel the
    /// principal sends to this replica for a request running on another reaches it there.
    pub fn on<P>(replica: Replica) -> Self
    where
        P: Clone + Eq + Hash + fmt::Display + Send + Sync + 'static,
    {
        Self {
            principals: Box::new(PrincipalScopes::<P>::named(
                DEFAULT_PRINCIPAL_LINGER,
                DEFAULT_MAX_PRINCIPALS,
            )),
            settings: Settings {
                replica: Some(replica),
                ..Settings::default()
            },
        }
    }

    /// The most requests one principal runs at once.
    pub fn max_in_flight_per_principal(mut self, requests: usize) -> Self {
        self.settings.max_in_flight_per_scope = requests;
        self
    }

    /// The scope of the principal in `extensions`, made if it has none, and held while the returned
    /// [`PrincipalScope`] lives; `None` when `extensions` name no principal, and [`TooManyPrincipals`] when the
    /// table is full of principals with requests in flight or within their linger.
    pub fn lease(
        &self,
        extensions: &http::Extensions,
    ) -> Option<Result<PrincipalScope, TooManyPrincipals>> {
        let leased = self.principals.lease(extensions, &self.settings)?;
        Some(
            leased
                .map(|(scope, quota, lease)| PrincipalScope {
                    scope,
                    quota,
                    _lease: lease,
                })
                .map_err(|Full| TooManyPrincipals),
        )
    }
}

impl fmt::Debug for ScopesByPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopesByPrincipal")
            .field("replica", &self.settings.replica.is_some())
            .finish_non_exhaustive()
    }
}

/// A principal's scope, held (it is never swept while this lives).
pub struct PrincipalScope {
    scope: Scope,
    quota: Quota,
    _lease: Box<dyn Send + Sync>,
}

impl PrincipalScope {
    /// The scope.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The bound on the principal's requests in flight, to admit each one in ([`Front::admit`](super::Front::admit)).
    pub fn quota(&self) -> &Quota {
        &self.quota
    }
}

impl fmt::Debug for PrincipalScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrincipalScope").finish_non_exhaustive()
    }
}

/// No principal's scope could be made: the table is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooManyPrincipals;

impl fmt::Display for TooManyPrincipals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("too many principals")
    }
}

impl std::error::Error for TooManyPrincipals {}
