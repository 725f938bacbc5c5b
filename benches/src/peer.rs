//! The second process of the transport benchmarks.
//!
//! The benchmark (the parent) starts itself again as `harp-bench transport-peer --mode MODE
//! --credentials DIR`; the child binds a loopback port, prints `listening ADDR` as its first
//! line on stdout, serves one connection from the parent and exits when it closes. The
//! child also exits when its stdin closes, so it never outlives a parent that died.
//! Diagnostics go to stderr, which the child shares with the parent.

use crate::{via_harp, via_quinn, via_tcp, Args};
use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use harp_net::JobCredentials;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the parent waits for a child to announce its address.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a child waits for the parent to connect.
pub const ACCEPT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a peer process serves.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum PeerMode {
    /// harp's `Link`: acks every `DumpRows` with `Applied`, answers every `Get` with `Rows`.
    Harp,
    /// Raw quinn: reads every unidirectional stream to its end and acks on a control stream.
    QuinnBulk,
    /// Raw quinn: answers every length-prefixed request on one bidirectional stream.
    QuinnRtt,
    /// TCP: reads every length-prefixed payload and acks it.
    Tcp,
}

impl PeerMode {
    fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_else(|| format!("{self:?}"))
    }
}

/// A job's certificate authority saved in a fresh temporary directory (removed on drop), so
/// that the peer processes can load it.
pub struct JobDir {
    pub creds: JobCredentials,
    pub dir: PathBuf,
}

impl JobDir {
    pub fn create(job: &str) -> Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir =
            std::env::temp_dir().join(format!("harp-bench-{job}-{}-{nanos}", std::process::id()));
        let creds = JobCredentials::generate(job)?;
        creds.save(&dir)?;
        Ok(Self { creds, dir })
    }
}

impl Drop for JobDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running peer process; stopped on drop.
pub struct PeerProcess {
    pub addr: SocketAddr,
    mode: PeerMode,
    child: Child,
    /// Held open: the child exits when it closes.
    stdin: Option<ChildStdin>,
}

impl PeerProcess {
    /// Starts `harp-bench transport-peer --mode MODE --credentials DIR EXTRA...` and waits
    /// for the address it listens on.
    pub fn spawn(mode: PeerMode, creds_dir: &Path, extra: &[String]) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find the harp-bench executable")?;
        let mut child = Command::new(&exe)
            .arg("transport-peer")
            .arg("--mode")
            .arg(mode.name())
            .arg("--credentials")
            .arg(creds_dir)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {} transport-peer", exe.display()))?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("the {} peer has no stdout", mode.name()))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let read = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(read.map(|_| line));
        });
        let mut peer = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            mode,
            child,
            stdin,
        };
        let line = match rx.recv_timeout(ANNOUNCE_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => bail!("cannot read the {} peer's address: {e}", mode.name()),
            Err(_) => bail!(
                "the {} peer did not announce its address within {} s",
                mode.name(),
                ANNOUNCE_TIMEOUT.as_secs()
            ),
        };
        peer.addr = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| {
                anyhow!(
                    "the {} peer did not start (its first line was {:?}; see its stderr above)",
                    mode.name(),
                    line.trim()
                )
            })?;
        Ok(peer)
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        eprintln!(
            "stopping the {} peer (pid {})",
            self.mode.name(),
            self.child.id()
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Child side: prints the address the parent reads.
pub fn announce(addr: SocketAddr) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening {addr}")
        .and_then(|_| out.flush())
        .context("cannot announce the peer's address")
}

/// A multi-threaded tokio runtime (all cores), as both ends of every benchmark use.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start a tokio runtime")
}

/// `harp-bench transport-peer`: serves the parent until it disconnects.
pub fn main(args: &Args) -> Result<()> {
    let mode = args
        .mode
        .ok_or_else(|| anyhow!("transport-peer needs --mode"))?;
    let dir = args
        .credentials
        .as_deref()
        .ok_or_else(|| anyhow!("transport-peer needs --credentials DIR"))?;
    let creds = JobCredentials::load(dir)?;
    let identity = creds.issue_node()?;
    // Exit as soon as the parent goes away (its end of our stdin closes).
    std::thread::spawn(|| {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(0);
    });
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    match mode {
        PeerMode::Tcp => via_tcp::serve(loopback),
        PeerMode::Harp => runtime()?.block_on(via_harp::serve(
            loopback,
            &creds,
            &identity,
            args.frame_bytes_max,
            args.reply_values,
        )),
        PeerMode::QuinnBulk => {
            runtime()?.block_on(via_quinn::serve_bulk(loopback, &creds, &identity))
        }
        PeerMode::QuinnRtt => runtime()?.block_on(via_quinn::serve_rtt(
            loopback,
            &creds,
            &identity,
            args.reply_values,
        )),
    }
    .with_context(|| format!("transport-peer --mode {}", mode.name()))
}
