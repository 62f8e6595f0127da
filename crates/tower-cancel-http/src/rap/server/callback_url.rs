//! The invocation's side of refusing private callbacks: a `callback_url` whose host is an internal IP address,
//! or a name that is always loopback, is refused before the call runs, so the runtime hears of it at once (a
//! 400) instead of waiting for a result that will never come. Other names are checked at each delivery (see
//! `public_resolver`).
//!
//! The host is read as reqwest, which delivers the result, reads it (the WHATWG URL rules): there,
//! `http://2130706433/` and `http://0x7f.1/` are `127.0.0.1`, and a check of the text as written would let them
//! through.

use std::net::IpAddr;

use super::internal_addresses::is_internal;

/// Why a callback URL is refused.
pub(super) const INTERNAL: &str =
    "an internal address (loopback, private, link-local...): this tool server delivers only to public ones";

/// `Err` if `url`'s host is an internal IP address, `localhost` or a name under `.localhost`.
pub(super) fn check_public(url: &str) -> Result<(), &'static str> {
    let url = reqwest::Url::parse(url).map_err(|_| "not a URL")?;
    let host = url.host_str().ok_or("no host")?;
    // An IPv6 host is written in brackets.
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = literal.parse::<IpAddr>() {
        return if is_internal(ip) {
            Err(INTERNAL)
        } else {
            Ok(())
        };
    }
    // RFC 6761: `localhost` and the names under it are loopback, whatever a resolver says.
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return Err(INTERNAL);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_public;

    #[test]
    fn internal_hosts_are_refused_however_they_are_written() {
        for url in [
            "http://127.0.0.1:8080/cb",
            "http://169.254.169.254/latest/meta-data",
            "http://10.0.0.1/cb",
            "http://[::1]:9/cb",
            "http://[::ffff:127.0.0.1]/cb",
            "http://[fd00::1]/cb",
            "http://2130706433/cb",
            "http://0x7f.1/cb",
            "http://0/cb",
            "https://localhost/cb",
            "http://LOCALHOST./cb",
            "http://api.localhost:3000/cb",
        ] {
            assert!(check_public(url).is_err(), "{url} is refused");
        }
    }

    #[test]
    fn public_hosts_and_other_names_pass() {
        for url in [
            "https://runtime.example.com/rap/results",
            "http://8.8.8.8/cb",
            "http://[2606:4700::1111]:8443/cb",
            "http://localhost.example.com/cb",
        ] {
            assert_eq!(check_public(url), Ok(()), "{url}");
        }
    }
}
