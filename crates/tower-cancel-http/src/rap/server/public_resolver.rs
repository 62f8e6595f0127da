//! The name resolution of the results' client when private callbacks are refused: a callback's host name is
//! resolved at each delivery and only its public addresses are connected to.
//!
//! Checking the name at the invocation and connecting later would let a name that first resolved to a public
//! address resolve to an internal one at delivery (DNS rebinding); filtering what the connection itself uses
//! leaves no such gap.

use std::{error::Error, fmt, net::SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::internal_addresses::is_internal;

/// A [`reqwest::dns::Resolve`] that gives only the public addresses a name resolves to (the system's resolver,
/// then the addresses of [`ToolServer::refuse_private_callbacks`](super::ToolServer::refuse_private_callbacks)
/// taken out), and fails for a name that has none.
///
/// The tool server's own results client uses it when private callbacks are refused; give it to the
/// `reqwest::Client` you pass to [`ToolServer::callback_client`](super::ToolServer::callback_client) for the
/// same (`reqwest::Client::builder().dns_resolver(PublicResolver)`): without it, a callback's host name is
/// resolved by your client as it likes.
#[derive(Clone, Copy, Debug, Default)]
pub struct PublicResolver;

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            // The port is the URL's: reqwest puts it in place of this 0.
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let public: Vec<SocketAddr> = resolved.filter(|addr| !is_internal(addr.ip())).collect();
            if public.is_empty() {
                return Err(Box::new(InternalOnly { host }) as Box<dyn Error + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

/// A callback's host name resolved to internal addresses only: not connected to, and not tried again.
#[derive(Debug)]
pub(super) struct InternalOnly {
    host: String,
}

impl fmt::Display for InternalOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resolves to internal addresses only (private callbacks are refused)",
            self.host
        )
    }
}

impl Error for InternalOnly {}

/// Whether `error` (a delivery's) is, somewhere down its sources, [`InternalOnly`].
pub(super) fn is_internal_only(error: &(dyn Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<InternalOnly>() {
            return true;
        }
        cause = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use reqwest::dns::Resolve;

    use super::{is_internal_only, PublicResolver};

    #[tokio::test]
    async fn a_name_of_internal_addresses_only_resolves_to_nothing() {
        let Err(error) = PublicResolver.resolve("localhost".parse().unwrap()).await else {
            panic!("localhost resolved to a public address");
        };
        assert!(is_internal_only(error.as_ref()), "{error}");
        assert!(error.to_string().contains("localhost"));
    }
}
