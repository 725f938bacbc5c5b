//! Where the other nodes of a job reach a node's server: the address the node says it
//! listens at, with a wildcard IP (`harp node --bind 0.0.0.0`, listening on every
//! interface) replaced by the IP its connection to the master came from. A wildcard passed
//! on as it was would make each peer dial its own machine (0.0.0.0 reaches the local host
//! on Linux) instead of that node.

use std::net::SocketAddr;

/// The address peers dial for a node that said it listens at `advertised`, whose link to
/// the master comes from `seen_from`. Anything that is not a socket address with a wildcard
/// IP is kept as it is.
pub(crate) fn reachable_listen_addr(advertised: &str, seen_from: SocketAddr) -> String {
    match advertised.parse::<SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => {
            SocketAddr::new(seen_from.ip(), addr.port()).to_string()
        }
        _ => advertised.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::reachable_listen_addr;

    #[test]
    fn a_wildcard_ip_becomes_the_one_the_node_came_from_and_others_stay() {
        let from = "10.0.0.7:51234".parse().unwrap();
        assert_eq!(reachable_listen_addr("0.0.0.0:7100", from), "10.0.0.7:7100");
        assert_eq!(reachable_listen_addr("[::]:7100", from), "10.0.0.7:7100");
        let from_v6 = "[fd00::7]:51234".parse().unwrap();
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
}
