//! Hosts of their own on this machine, for the tests that cross a network: Linux network
//! namespaces (iproute2's `ip netns`), each joined by a veth pair to a bridge in the
//! test's namespace, each with an address of its own in a /24 of `10.200.0.0/13` picked
//! from the test's process id. A process started in one ([`NetHosts::command`]) reaches
//! the others, and processes of the test's namespace at [`NetHosts::gateway`], only over
//! that network, never over loopback: what a job spread over several machines sees.
//!
//! [`NetHosts::partition`] cuts a host off (its processes live on, unreachable) and
//! [`NetHosts::heal`] puts it back; [`NetHosts::isolate`] cuts hosts off from each other
//! only (each still reaches the test's namespace), [`NetHosts::cut_from_gateway`] a host
//! off from the test's namespace only (it still reaches the other hosts) and
//! [`NetHosts::cut_between`] two hosts off from each other only.
//!
//! Creating them needs root (CAP_NET_ADMIN) and the `ip` command, and the machine must let
//! UDP through between them (checked: every host to the gateway, host 0 to host 1); where
//! anything of that is missing, [`NetHosts::create`] prints why (`skipping: ...`) and
//! returns `None`. Dropping them
//! removes the namespaces and the bridge (and with them the veth pairs).

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Network namespaces bridged to the test's own: see the module doc.
pub struct NetHosts {
    bridge: String,
    namespaces: Vec<String>,
    /// The bridge's end of each host's veth pair.
    links: Vec<String>,
    /// The first three octets of the /24 (`a.b.c.0`).
    subnet: [u8; 3],
}

/// Runs `ip ARGS`; its stderr on failure.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetHosts {
    /// `count` hosts (at most 200), or `None` (with a `skipping:` line saying why) where
    /// this process may not create network namespaces.
    pub fn create(count: usize) -> Option<NetHosts> {
        assert!(count <= 200, "at most 200 hosts");
        // Unique among this process's sets (tests run on threads of one process) and,
        // through the pid, among processes: names and subnet.
        static CREATED: AtomicU32 = AtomicU32::new(0);
        let nth = CREATED.fetch_add(1, Ordering::Relaxed) % 64;
        let tag = std::process::id().wrapping_mul(64).wrapping_add(nth) & 0x0fff_ffff;
        let subnet = [10, 200 + (tag >> 8) as u8 % 8, tag as u8];
        let mut hosts = NetHosts {
            bridge: format!("hb{tag:x}"),
            namespaces: Vec::new(),
            links: Vec::new(),
            subnet,
        };
        match hosts.build(count, tag).and_then(|()| hosts.probe()) {
            Ok(()) => Some(hosts),
            Err(why) => {
                println!(
                    "skipping: cannot create network namespaces for hosts of their own ({why})"
                );
                None
            }
        }
    }

    /// Checks that UDP gets through where the tests need it (a firewall of the machine's,
    /// e.g. one that filters bridged traffic, would make them fail for reasons of its own):
    /// from every host to the gateway, and from host 0 to host 1.
    fn probe(&self) -> Result<(), String> {
        let socket = UdpSocket::bind((self.gateway(), 0)).map_err(|e| e.to_string())?;
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .map_err(|e| e.to_string())?;
        let to = socket.local_addr().map_err(|e| e.to_string())?;
        for host in 0..self.namespaces.len() {
            self.send_udp(host, to, &format!("host {host}"))?;
            let mut buf = [0u8; 64];
            let got = socket.recv(&mut buf).map_err(|e| {
                format!(
                    "host {host} cannot reach the gateway {} ({e})",
                    self.gateway()
                )
            })?;
            if buf[..got] != *format!("host {host}\n").as_bytes() {
                return Err(format!("the gateway got something else from host {host}"));
            }
        }
        if self.namespaces.len() >= 2 {
            self.probe_between(0, 1)?;
        }
        Ok(())
    }

    /// Host `from` reaches host `to` (a listener there: python3, absent which this is not
    /// checked).
    fn probe_between(&self, from: usize, to: usize) -> Result<(), String> {
        let python = Command::new("python3").arg("--version").output();
        if !python.is_ok_and(|out| out.status.success()) {
            return Ok(());
        }
        let port = 47_000 + (std::process::id() % 1000) as u16;
        let listen = format!(
            "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
             s.bind(('0.0.0.0', {port})); s.settimeout(3); print(s.recv(64).decode().strip())"
        );
        let listener = self
            .command(to, Path::new("python3"))
            .args(["-c", &listen])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run python3 on host {to}: {e}"))?;
        let target = std::net::SocketAddr::new(self.addr(to), port);
        // A few sends: the listener may not be bound yet.
        for _ in 0..10 {
            self.send_udp(from, target, "across")?;
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = listener.wait_with_output().map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&out.stdout).trim() == "across" {
            Ok(())
        } else {
            Err(format!(
                "host {from} cannot reach host {to} over the bridge"
            ))
        }
    }

    /// Sends `text` from host `host` to `to` over UDP (bash's `/dev/udp`).
    fn send_udp(&self, host: usize, to: std::net::SocketAddr, text: &str) -> Result<(), String> {
        let script = format!("echo '{text}' > /dev/udp/{}/{}", to.ip(), to.port());
        let status = self
            .command(host, Path::new("bash"))
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run bash on host {host}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("host {host} could not send to {to}"))
        }
    }

    fn build(&mut self, count: usize, tag: u32) -> Result<(), String> {
        let bridge = self.bridge.clone();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        let gateway = format!("{}/24", self.gateway());
        ip(&["addr", "add", &gateway, "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for host in 0..count {
            let name = format!("harp-test-{tag:x}-{host}");
            ip(&["netns", "add", &name])?;
            self.namespaces.push(name.clone());
            let veth = format!("hv{tag:x}{host:02x}");
            ip(&[
                "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name,
            ])?;
            self.links.push(veth.clone());
            ip(&["link", "set", &veth, "master", &bridge, "up"])?;
            let addr = format!("{}/24", self.addr(host));
            ip(&["-n", &name, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &name, "link", "set", "eth0", "up"])?;
            ip(&["-n", &name, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// The test's own namespace's address on the hosts' network: where they reach a
    /// process of the test's namespace that listens on every interface.
    pub fn gateway(&self) -> IpAddr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1).into()
    }

    /// How many hosts there are.
    pub fn len(&self) -> usize {
        self.namespaces.len()
    }

    /// Whether there are none (never: [`Self::create`] makes at least one).
    pub fn is_empty(&self) -> bool {
        self.namespaces.is_empty()
    }

    /// Host `host`'s address.
    pub fn addr(&self, host: usize) -> IpAddr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 2 + host as u8).into()
    }

    /// Cuts host `host` off the network (its link to the bridge goes down: what it sends
    /// and what is sent to it is lost, its processes go on) until [`Self::heal`].
    pub fn partition(&self, host: usize) {
        ip(&["link", "set", &self.links[host], "down"]).unwrap();
    }

    /// Puts host `host` back on the network.
    pub fn heal(&self, host: usize) {
        ip(&["link", "set", &self.links[host], "up"]).unwrap();
    }

    /// Cuts hosts `hosts` off from each other, each still reaching the test's namespace
    /// (the master's): their bridge ports are isolated, so the bridge forwards nothing
    /// between them. `false` puts it back.
    pub fn isolate(&self, hosts: &[usize], isolated: bool) {
        let on = if isolated { "on" } else { "off" };
        for &host in hosts {
            let link = &self.links[host];
            ip(&[
                "link",
                "set",
                "dev",
                link,
                "type",
                "bridge_slave",
                "isolated",
                on,
            ])
            .unwrap();
        }
    }

    /// Cuts host `host` off from the test's namespace only (what it sends there is
    /// dropped, so no exchange with a process of the test's namespace completes), while it
    /// still reaches the other hosts; `cut == false` puts it back.
    pub fn cut_from_gateway(&self, host: usize, cut: bool) {
        self.cut_route(host, self.gateway(), cut);
    }

    /// Cuts hosts `a` and `b` off from each other only (each still reaches the test's
    /// namespace and the other hosts); `cut == false` puts them back.
    pub fn cut_between(&self, a: usize, b: usize, cut: bool) {
        self.cut_route(a, self.addr(b), cut);
        self.cut_route(b, self.addr(a), cut);
    }

    /// A blackhole route to `to` in host `host`'s namespace (set, also where it is
    /// already, or with `cut == false` removed): what it sends there is dropped.
    fn cut_route(&self, host: usize, to: IpAddr, cut: bool) {
        let to = format!("{to}/32");
        let verb = if cut { "replace" } else { "del" };
        ip(&[
            "-n",
            &self.namespaces[host],
            "route",
            verb,
            "blackhole",
            &to,
        ])
        .unwrap();
    }

    /// A command that runs `program` on host `host` (`ip netns exec`, which execs it: the
    /// child's pid is the program's).
    pub fn command(&self, host: usize, program: &Path) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespaces[host]])
            .arg(program);
        command
    }
}

impl Drop for NetHosts {
    fn drop(&mut self) {
        for name in &self.namespaces {
            let _ = ip(&["netns", "del", name]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
