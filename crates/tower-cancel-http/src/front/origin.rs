//! `Origin` validation, against DNS rebinding: a page on another site must not reach a server bound to loopback
//! through the user's browser. MCP's revisions require it of a POST, and a browser's WebSocket carries an `Origin`
//! too (an ABP app checks it before the upgrade). A refused origin is answered 403, each front end its own way.

use http::HeaderMap;

/// Which `Origin`s may call an endpoint ([`McpHttp::origins`](crate::McpHttp::origins),
/// [`AbpApp::origins`](crate::abp::AbpApp::origins)). A request without an `Origin` header (not a browser: an
/// agent's library, `curl`) is always let through.
#[derive(Clone, Debug, Default)]
pub enum Origins {
    /// Pages served from this machine only: `localhost`, `127.0.0.1` and `[::1]`, any scheme and port. The
    /// default, for servers bound to loopback.
    #[default]
    Loopback,
    /// These origins exactly (as the browser sends them: `https://app.example.com`), and the loopback ones.
    List(Vec<String>),
    /// Any origin (behind a proxy that checks it, for one).
    Any,
}

impl Origins {
    pub(crate) fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(http::header::ORIGIN) else {
            return true;
        };
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        match self {
            Origins::Any => true,
            Origins::Loopback => is_loopback(origin),
            Origins::List(list) => {
                is_loopback(origin) || list.iter().any(|allowed| allowed == origin)
            }
        }
    }
}

/// An origin is `scheme://host[:port]` and nothing else (RFC 6454): anything after the host but a port (a
/// `@`, a path) makes it no loopback origin, so that `http://localhost:80@evil.example` is not taken for one.
fn is_loopback(origin: &str) -> bool {
    let Some((_scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let (host, after) = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some(split) => split,
            None => return false,
        }
    } else {
        rest.split_at(rest.find(':').unwrap_or(rest.len()))
    };
    let port_only = after.is_empty()
        || after.strip_prefix(':').is_some_and(|port| {
            (1..=5).contains(&port.len()) && port.bytes().all(|b| b.is_ascii_digit())
        });
    port_only && matches!(host, "localhost" | "127.0.0.1" | "::1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(origin: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::ORIGIN, origin.parse().unwrap());
        headers
    }

    #[test]
    fn loopback_origins_pass_and_others_do_not() {
        let loopback = Origins::Loopback;
        assert!(loopback.allows(&HeaderMap::new()));
        for ok in [
            "http://localhost:3000",
            "https://127.0.0.1",
            "http://[::1]:8080",
            "http://localhost",
        ] {
            assert!(loopback.allows(&with(ok)), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.1.nip.io",
            "http://localhost:80@evil.example",
            "http://localhost@evil.example",
            "http://[::1]@evil.example",
            "http://127.0.0.1:80/evil",
            "http://localhost:",
            "null",
            "http://[::2]",
        ] {
            assert!(!loopback.allows(&with(bad)), "{bad}");
        }
        let listed = Origins::List(vec!["https://app.example.com".into()]);
        assert!(listed.allows(&with("https://app.example.com")));
        assert!(!listed.allows(&with("https://app.example.com.evil")));
        assert!(Origins::Any.allows(&with("http://evil.example")));
    }
}
