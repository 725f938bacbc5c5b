//! `HOST:PORT` arguments (`--join`, `--job`, `--listen`): an IP address with its port, or
//! a host name that resolves to one (`master.example:7000`, `localhost:7000`), resolved
//! once when the command starts. An IPv4 address is preferred when a name has both kinds.

use std::net::{SocketAddr, ToSocketAddrs};

/// Parses `text` as `IP:PORT` or resolves `HOST:PORT`.
pub fn host_port(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let resolved: Vec<SocketAddr> = match text.to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(e) => {
            return Err(format!(
                "expected HOST:PORT or IP:PORT, and {text:?} does not resolve: {e}"
            ))
        }
    };
    (resolved.iter().find(|addr| addr.is_ipv4()))
        .or_else(|| resolved.first())
        .copied()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_resolve_and_nonsense_is_refused() {
        assert_eq!(
            host_port("10.1.2.3:7000"),
            Ok(SocketAddr::from(([10, 1, 2, 3], 7000)))
        );
        assert_eq!(host_port("[::1]:7000").map(|a| a.port()), Ok(7000));
        let local = host_port("localhost:7000").expect("localhost resolves");
        assert!(local.ip().is_loopback() && local.port() == 7000, "{local}");
        for bad in ["localhost", "localhost:port", ":7000"] {
            let refused = host_port(bad).expect_err(bad);
            assert!(refused.contains(bad), "{refused}");
        }
    }
}
