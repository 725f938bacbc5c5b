//! Where the processes of a job reach each other, on one host or on many.
//!
//! A node listens for the other nodes on the endpoint it joined the master from, bound to
//! `--bind` ([`default_bind`]: every interface of the master address's family, so that
//! nodes on other hosts reach it). The master tells every node where each server listens
//! ([`reachable_listen_addr`]): what the node said, with a wildcard IP (listening on every
//! interface) replaced by the IP its connection to the master came from. A node whose
//! connection came over loopback lives on the master's host; its wildcard is kept, and
//! each process that dials it reads it as "the master's host" ([`dial_addr`]): loopback for
//! the processes there, the master's address for those on other hosts. So a node started
//! beside the master with `--join 127.0.0.1:PORT` and nodes on other hosts make one job.
//!
//! A wildcard passed on as it was would make each peer dial its own machine (0.0.0.0
//! reaches the local host on Linux) instead of that node; a loopback address seen from
//! another host names that host itself, which is why a node bound to loopback cannot
//! join a master elsewhere ([`check_bind_reaches`]) and why a failed dial of a loopback
//! address from another host says so ([`loopback_hint`]).

use crate::error::HarpError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The address peers dial for a node that said it listens at `advertised`, whose link to
/// the master comes from `seen_from`. A wildcard IP becomes `seen_from`'s IP, or stays a
/// wildcard (the master's host) when that is a loopback address; anything that is not a
/// socket address with a wildcard IP is kept as it is.
pub(crate) fn reachable_listen_addr(advertised: &str, seen_from: SocketAddr) -> String {
    match advertised.parse::<SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => {
            let from = seen_from.ip().to_canonical();
            if from.is_loopback() {
                addr.to_string()
            } else {
                SocketAddr::new(from, addr.port()).to_string()
            }
        }
        _ => advertised.to_string(),
    }
}

/// Where a process dials `addr`, a listen address the master told it, when it reaches the
/// master's host at `master_ip`: a wildcard IP names the master's host.
pub(crate) fn dial_addr(addr: SocketAddr, master_ip: IpAddr) -> SocketAddr {
    if !addr.ip().is_unspecified() {
        addr
    } else if master_ip.to_canonical().is_loopback() {
        dialable(addr)
    } else {
        SocketAddr::new(master_ip, addr.port())
    }
}

/// `addr` with a wildcard IP (`0.0.0.0:7000`, as a master listening on every interface
/// prints it) replaced by the loopback address of its family: where a process on the same
/// host dials it.
pub fn dialable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port())
        }
        _ => addr,
    }
}

/// The address a node that joins the master at `join` listens on unless told otherwise:
/// every interface of `join`'s family, so that the job's nodes on other hosts reach it.
pub fn default_bind(join: SocketAddr) -> IpAddr {
    match join {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    }
}

/// Refuses a `bind` from which the master at `join` cannot be reached: a loopback address
/// for a master on another host, or an IPv4 address for an IPv6 master (and the other way
/// round, but for `::`, which takes both).
pub fn check_bind_reaches(bind: IpAddr, join: SocketAddr) -> Result<(), HarpError> {
    let join_ip = dialable(join).ip().to_canonical();
    if bind.is_loopback() && !join_ip.is_loopback() {
        return Err(HarpError::InvalidConfig(format!(
            "this node is bound to {bind}, a loopback address, from which the master at \
             {join} on another host cannot be reached (nor could the job's other nodes \
             reach this one): bind it to every interface (`--bind 0.0.0.0`, the default) \
             or to an address of this host"
        )));
    }
    let families_differ = bind.is_ipv4() != join_ip.is_ipv4();
    let dual_stack = bind == IpAddr::V6(Ipv6Addr::UNSPECIFIED);
    if families_differ && !dual_stack {
        return Err(HarpError::InvalidConfig(format!(
            "this node is bound to {bind}, which cannot reach the master at {join}: bind \
             it to an address of the master address's family (or leave --bind out)"
        )));
    }
    Ok(())
}

/// Why a dial of `addr` (as told, before [`dial_addr`]) from a process bound to `bound`
/// that reaches the master's host at `master_ip` may have failed, when the reason is a
/// loopback address: one told to a process on another host names that host, not the
/// node's; and a process bound to loopback reaches no other host.
pub(crate) fn loopback_hint(addr: SocketAddr, master_ip: IpAddr, bound: IpAddr) -> Option<String> {
    let told_loopback = addr.ip().to_canonical().is_loopback();
    if told_loopback && !master_ip.to_canonical().is_loopback() {
        return Some(format!(
            "it listens on {addr}, a loopback address, which no process on another host \
             can reach: start that node with --bind 0.0.0.0 (the default) or an address \
             of its host"
        ));
    }
    let target = dial_addr(addr, master_ip).ip().to_canonical();
    (bound.to_canonical().is_loopback() && !target.is_loopback()).then(|| {
        format!(
            "this node is bound to {bound}, a loopback address, from which {addr} on \
             another host cannot be reached: start it with --bind 0.0.0.0 (the default) \
             or an address of its host"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sock(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_wildcard_ip_becomes_the_one_the_node_came_from_and_others_stay() {
        let from = sock("10.0.0.7:51234");
        assert_eq!(reachable_listen_addr("0.0.0.0:7100", from), "10.0.0.7:7100");
        assert_eq!(reachable_listen_addr("[::]:7100", from), "10.0.0.7:7100");
        let from_v6 = sock("[fd00::7]:51234");
        assert_eq!(
            reachable_listen_addr("[::]:7100", from_v6),
            "[fd00::7]:7100"
        );
        assert_eq!(
            reachable_listen_addr("10.0.0.9:7100", from),
            "10.0.0.9:7100"
        );
        assert_eq!(reachable_listen_addr("node-3:7100", from), "node-3:7100");
    }

    /// An IPv4 node seen by a master listening on `[::]` comes from a mapped address; peers
    /// with IPv4 sockets must be told the IPv4 one.
    #[test]
    fn a_mapped_ipv4_address_is_told_as_ipv4() {
        let from = sock("[::ffff:10.0.0.7]:51234");
        assert_eq!(reachable_listen_addr("0.0.0.0:7100", from), "10.0.0.7:7100");
    }

    #[test]
    fn a_wildcard_seen_over_loopback_stays_the_masters_host() {
        for from in ["127.0.0.1:4000", "[::1]:4000", "[::ffff:127.0.0.1]:4000"] {
            assert_eq!(
                reachable_listen_addr("0.0.0.0:7100", sock(from)),
                "0.0.0.0:7100"
            );
        }
        // A node bound to loopback stays where it said.
        assert_eq!(
            reachable_listen_addr("127.0.0.1:7100", sock("127.0.0.1:4000")),
            "127.0.0.1:7100"
        );
    }

    #[test]
    fn the_masters_host_is_dialled_where_the_dialler_reaches_the_master() {
        let on_masters_host = sock("0.0.0.0:7100");
        let local: IpAddr = Ipv4Addr::LOCALHOST.into();
        let remote: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(dial_addr(on_masters_host, local), sock("127.0.0.1:7100"));
        assert_eq!(dial_addr(on_masters_host, remote), sock("10.0.0.1:7100"));
        assert_eq!(
            dial_addr(sock("10.0.0.9:7100"), remote),
            sock("10.0.0.9:7100")
        );
        assert_eq!(dial_addr(sock("[::]:7100"), remote), sock("10.0.0.1:7100"));
        // On the master's host, the wildcard's own family's loopback.
        assert_eq!(dial_addr(sock("[::]:7100"), local), sock("[::1]:7100"));
    }

    #[test]
    fn a_wildcard_is_dialled_on_loopback_and_a_node_binds_every_interface_by_default() {
        assert_eq!(dialable(sock("0.0.0.0:7000")), sock("127.0.0.1:7000"));
        assert_eq!(dialable(sock("[::]:7000")), sock("[::1]:7000"));
        assert_eq!(dialable(sock("10.0.0.1:7000")), sock("10.0.0.1:7000"));
        assert_eq!(
            default_bind(sock("10.0.0.1:7000")),
            IpAddr::from(Ipv4Addr::UNSPECIFIED)
        );
        assert_eq!(
            default_bind(sock("127.0.0.1:7000")),
            IpAddr::from(Ipv4Addr::UNSPECIFIED)
        );
        assert_eq!(
            default_bind(sock("[fd00::1]:7000")),
            IpAddr::from(Ipv6Addr::UNSPECIFIED)
        );
    }

    #[test]
    fn a_bind_that_cannot_reach_the_master_is_refused_with_why() {
        let loopback: IpAddr = Ipv4Addr::LOCALHOST.into();
        let every: IpAddr = Ipv4Addr::UNSPECIFIED.into();
        let e = check_bind_reaches(loopback, sock("10.0.0.1:7000")).unwrap_err();
        assert!(matches!(e, HarpError::InvalidConfig(_)));
        let text = e.to_string();
        assert!(text.contains("127.0.0.1, a loopback address"), "{text}");
        assert!(text.contains("10.0.0.1:7000 on another host"), "{text}");
        assert!(check_bind_reaches(loopback, sock("127.0.0.1:7000")).is_ok());
        assert!(check_bind_reaches(loopback, sock("0.0.0.0:7000")).is_ok());
        assert!(check_bind_reaches(every, sock("10.0.0.1:7000")).is_ok());
        assert!(check_bind_reaches("10.0.0.2".parse().unwrap(), sock("10.0.0.1:7000")).is_ok());
        let e = check_bind_reaches(every, sock("[fd00::1]:7000")).unwrap_err();
        assert!(e.to_string().contains("family"), "{e}");
        assert!(check_bind_reaches(Ipv6Addr::UNSPECIFIED.into(), sock("10.0.0.1:7000")).is_ok());
    }

    #[test]
    fn a_dial_that_a_loopback_address_defeats_gets_the_hint() {
        let remote: IpAddr = "10.0.0.1".parse().unwrap();
        let local: IpAddr = Ipv4Addr::LOCALHOST.into();
        let every: IpAddr = Ipv4Addr::UNSPECIFIED.into();
        let hint = loopback_hint(sock("127.0.0.1:7100"), remote, every).unwrap();
        assert!(
            hint.contains("127.0.0.1:7100, a loopback address"),
            "{hint}"
        );
        assert!(hint.contains("--bind 0.0.0.0"), "{hint}");
        assert_eq!(loopback_hint(sock("127.0.0.1:7100"), local, every), None);
        assert_eq!(loopback_hint(sock("10.0.0.9:7100"), remote, every), None);
        assert_eq!(loopback_hint(sock("0.0.0.0:7100"), remote, every), None);
        // A node bound to loopback beside the master, dialling a node on another host.
        let hint = loopback_hint(sock("10.0.0.9:7100"), local, local).unwrap();
        assert!(
            hint.contains("bound to 127.0.0.1, a loopback address"),
            "{hint}"
        );
        assert!(hint.contains("10.0.0.9:7100 on another host"), "{hint}");
        assert_eq!(loopback_hint(sock("127.0.0.1:7100"), local, local), None);
        assert_eq!(loopback_hint(sock("0.0.0.0:7100"), local, local), None);
    }
}
