//! A rate limit per client (see `client_key`), whose table of clients is bounded.
//!
//! governor's keyed limiter keeps one state per key it has seen, for ever unless told: every
//! [`SWEEP_EVERY`], and whenever the table is full, the clients whose quota is whole again are forgotten
//! (`retain_recent`, which costs one pass over the table: hence at most once per [`SWEEP_EVERY`] and once per
//! [`FULL_SWEEP_EVERY`]). When the table is still full, a new client is not added: every client that comes while
//! it is full shares one quota, [`ClientKey::Overflow`], until the table has room (clients seen within the last
//! two seconds or so: a table of [`MAX_CLIENTS`] is only full when that many clients flood at once).

use std::{
    num::NonZeroU32,
    sync::Mutex,
    time::{Duration, Instant},
};

use governor::{
    clock::{Clock, DefaultClock},
    state::keyed::HashMapStateStore,
    Quota, RateLimiter,
};

use super::client_key::ClientKey;

/// The most clients kept: a key and its state are a few dozen bytes, so under a megabyte in all.
pub(super) const MAX_CLIENTS: usize = 10_000;

/// How often the clients whose quota is whole again are forgotten.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// How often they are forgotten at most while the table is full.
const FULL_SWEEP_EVERY: Duration = Duration::from_millis(100);

/// One quota per client, `per_second` with bursts of twice it.
#[derive(Debug)]
pub(super) struct ClientLimits {
    limiter: RateLimiter<ClientKey, HashMapStateStore<ClientKey>, DefaultClock>,
    max_clients: usize,
    last_sweep: Mutex<Instant>,
}

impl ClientLimits {
    pub(super) fn new(per_second: u32, max_clients: usize) -> Self {
        let rate = NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN);
        let burst = rate.saturating_mul(NonZeroU32::new(2).expect("2 is not 0"));
        Self {
            limiter: RateLimiter::hashmap(Quota::per_second(rate).allow_burst(burst)),
            max_clients: max_clients.max(1),
            last_sweep: Mutex::new(Instant::now()),
        }
    }

    /// Take one from `client`'s quota; past it, how long until it has one again.
    pub(super) fn check(&self, client: ClientKey) -> Result<(), Duration> {
        let client = if self.has_room() {
            client
        } else {
            ClientKey::Overflow
        };
        self.limiter
            .check_key(&client)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// How many clients are kept now.
    #[cfg(test)]
    fn clients(&self) -> usize {
        self.limiter.len()
    }

    /// Whether a new client may be added: sweeps first when it is time, or when the table is full.
    fn has_room(&self) -> bool {
        let full = self.limiter.len() >= self.max_clients;
        let every = if full { FULL_SWEEP_EVERY } else { SWEEP_EVERY };
        let swept = {
            // Nothing panics while the lock is held.
            let mut last = self
                .last_sweep
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let due = last.elapsed() >= every;
            if due {
                *last = Instant::now();
            }
            due
        };
        if !swept {
            return !full;
        }
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
        let room = self.limiter.len() < self.max_clients;
        if !room {
            tracing::warn!(
                clients = self.max_clients,
                "the rate limit's table of clients is full: new clients share one quota"
            );
        }
        room
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::{ClientKey, ClientLimits};

    fn client(n: u8) -> ClientKey {
        ClientKey::Client {
            credential: 7,
            network: Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))),
        }
    }

    #[test]
    fn each_client_has_a_quota_of_its_own() {
        let limits = ClientLimits::new(1, 100);
        assert!(limits.check(client(1)).is_ok());
        assert!(limits.check(client(1)).is_ok());
        let wait = limits.check(client(1)).unwrap_err();
        assert!(wait.as_millis() > 0 && wait.as_millis() <= 1000, "{wait:?}");
        assert!(
            limits.check(client(2)).is_ok(),
            "another client is not starved"
        );
    }

    #[test]
    fn clients_past_the_table_share_one_quota() {
        let limits = ClientLimits::new(1, 2);
        assert!(limits.check(client(1)).is_ok());
        assert!(limits.check(client(2)).is_ok());
        assert_eq!(limits.clients(), 2);
        // The table is full of clients whose quota is not whole: the next ones share the overflow's.
        for n in 3..5 {
            assert!(limits.check(client(n)).is_ok());
        }
        assert!(limits.check(client(5)).is_err());
        assert_eq!(limits.clients(), 3, "the two clients and the overflow");
    }
}
