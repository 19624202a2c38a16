//! Who a client is, for its share of what a server has: the connections,
//! the live-page streams and the wrong-token allowance are counted per
//! client, so that one client cannot take everyone's.
//!
//! A client is its address: an IPv4 address, or an IPv6 address's /64
//! prefix. A /64 is what one host or one customer is given (RFC 6177,
//! the standard assignment), and any host on a /64 can use all 2^64
//! addresses of it, so counting IPv6 by address would let one machine
//! be 40 clients at once. An IPv4-mapped IPv6 address is its IPv4
//! address. Behind a proxy or a NAT every user shares one address and
//! so one share: the per-client limits are flags (`docs/operations.md`).
//!
//! **Invariant:** a [`Share`] is given back when it is dropped, whatever
//! ends the connection or stream that holds it; the count of clients
//! tracked is bounded by what they hold (an entry is removed when its
//! count returns to zero).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// A client, as the limits count it: an IPv4 address, or an IPv6 /64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Client {
    /// An IPv4 address (IPv4-mapped IPv6 addresses included).
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6([u8; 8]),
}

impl Client {
    /// The client of `ip`.
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Client::V4(v4.octets()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client::V4(v4.octets()),
                None => {
                    let o = v6.octets();
                    Client::V6([o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]])
                }
            },
        }
    }

    /// The client a request came from (its address, put there by
    /// `serving::http`; in process, without one, the unspecified
    /// address: one client).
    pub fn of_request(extensions: &http::Extensions) -> Self {
        Self::of(
            extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.0.ip()),
        )
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::V4(a) => write!(f, "{}", std::net::Ipv4Addr::from(*a)),
            Client::V6(p) => {
                let mut full = [0u8; 16];
                full[..8].copy_from_slice(p);
                write!(f, "{}/64", std::net::Ipv6Addr::from(full))
            }
        }
    }
}

/// How many of a thing a server has, and how many one client may hold.
pub struct Shares {
    total: usize,
    per_client: usize,
    held: parking_lot::Mutex<(usize, HashMap<Client, usize>)>,
}

/// Why a share was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The client holds its whole share.
    Client,
    /// The server has none left.
    Server,
}

impl Shares {
    /// `total` in all, at most `per_client` (at least one) for one client.
    pub fn new(total: usize, per_client: usize) -> Arc<Self> {
        Arc::new(Self {
            total: total.max(1),
            per_client: per_client.clamp(1, total.max(1)),
            held: parking_lot::Mutex::new((0, HashMap::new())),
        })
    }

    /// One for `client`, given back when the [`Share`] is dropped.
    pub fn take(self: &Arc<Self>, client: Client) -> Result<Share, Refused> {
        let mut held = self.held.lock();
        let (all, by_client) = &mut *held;
        let mine = by_client.get(&client).copied().unwrap_or(0);
        if mine >= self.per_client {
            return Err(Refused::Client);
        }
        if *all >= self.total {
            return Err(Refused::Server);
        }
        *all += 1;
        by_client.insert(client, mine + 1);
        Ok(Share {
            shares: self.clone(),
            client,
        })
    }

    /// How many `client` holds.
    #[cfg(test)]
    pub(crate) fn held_by(&self, client: Client) -> usize {
        self.held.lock().1.get(&client).copied().unwrap_or(0)
    }

    /// How many are held in all.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.lock().0
    }

    pub fn give_back(&self, client: Client) {
        let mut held = self.held.lock();
        let (all, by_client) = &mut *held;
        *all = all.saturating_sub(1);
        if let Some(n) = by_client.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                by_client.remove(&client);
            }
        }
    }
}

/// One share held by a client; given back on drop.
pub struct Share {
    shares: Arc<Shares>,
    client: Client,
}

impl Drop for Share {
    fn drop(&mut self) {
        self.shares.give_back(self.client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_64_is_one_client_and_ipv4_mapped_is_its_ipv4() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Client::of(a), Client::of(b));
        assert_ne!(Client::of(a), Client::of(c));
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        assert_eq!(Client::of(mapped), Client::of("10.0.0.7".parse().unwrap()));
        assert_ne!(
            Client::of("10.0.0.7".parse().unwrap()),
            Client::of("10.0.0.8".parse().unwrap())
        );
        assert_eq!(Client::of(a).to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn a_client_holds_at_most_its_share_and_gets_it_back_on_drop() {
        let shares = Shares::new(5, 2);
        let one = Client::of("10.0.0.1".parse().unwrap());
        let two = Client::of("10.0.0.2".parse().unwrap());
        let a = shares.take(one).unwrap();
        let _b = shares.take(one).unwrap();
        assert_eq!(shares.take(one).err(), Some(Refused::Client));
        // Another client is not refused for the first one's.
        let c = shares.take(two).unwrap();
        let _d = shares.take(two).unwrap();
        drop(a);
        assert_eq!(shares.held_by(one), 1);
        let _e = shares.take(one).unwrap();
        let three = Client::of("10.0.0.3".parse().unwrap());
        let _f = shares.take(three).unwrap();
        assert_eq!(shares.take(three).err(), Some(Refused::Server));
        drop(c);
        let _g = shares.take(three).unwrap();
        assert_eq!(shares.held(), 5);
    }
}
