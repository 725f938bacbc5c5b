//! A throwaway etcd server for tests: loopback only, random ports, a temporary data dir,
//! killed and cleaned up on drop. Used by this crate's etcd tests and by the multi-process
//! tests of the `harp` command.
//!
//! [`EtcdServer::start`] returns `None` (after printing [`SKIP`]) when no `etcd` binary is
//! installed, except under `CI=true`, where a missing binary is a broken setup and panics.

use crate::{EtcdMembership, EtcdOptions, MembershipConfig};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What a test prints when it skips for lack of etcd.
pub const SKIP: &str = "skipping: etcd not installed (run scripts/install-test-deps.sh)";

/// A throwaway etcd server: loopback only, random ports, a temporary data dir; killed and
/// cleaned up on drop.
pub struct EtcdServer {
    child: Child,
    dir: PathBuf,
    pub endpoint: String,
}

impl EtcdServer {
    /// Starts etcd, or returns `None` (after printing why) when it is not installed and
    /// this is not CI.
    pub async fn start() -> Option<Self> {
        let Some(binary) = find_etcd() else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("etcd not installed under CI=true: .ci/run must run scripts/install-test-deps.sh");
            }
            eprintln!("{SKIP}");
            return None;
        };
        let mut last_log = String::new();
        for attempt in 0..3 {
            match Self::try_start(&binary).await {
                Ok(server) => return Some(server),
                Err(log) => {
                    eprintln!("etcd start attempt {attempt} failed; retrying");
                    last_log = log;
                }
            }
        }
        panic!("etcd did not start (3 attempts); last log:\n{last_log}");
    }

    async fn try_start(binary: &Path) -> Result<Self, String> {
        let client_port = free_port();
        let peer_port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "harp-etcd-{}-{}-{}",
            std::process::id(),
            client_port,
            peer_port
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let client = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.join("etcd.log")).map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .arg("--name=default")
            .arg(format!("--data-dir={}", dir.join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=default={peer}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
        let mut server = Self {
            child,
            dir,
            endpoint: client,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("etcd exited with {status}:\n{}", server.log()));
            }
            if server.answers().await {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "etcd did not answer within 20 s:\n{}",
            server.log()
        ))
    }

    /// Whether a v3 request succeeds.
    async fn answers(&self) -> bool {
        let options = EtcdOptions {
            connect_timeout_ms: 500,
            request_timeout_ms: 500,
        };
        EtcdMembership::connect(
            &self.endpoint,
            "probe",
            MembershipConfig::default(),
            options,
        )
        .await
        .is_ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn find_etcd() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"));
    on_path
        .chain([PathBuf::from("/usr/bin/etcd")])
        .find(|p| p.is_file())
}

/// A free loopback TCP port (racy by nature; good enough for tests).
pub fn free_port() -> u16 {
    // Port 0 as a fallback makes the later bind fail with a clear error instead of a panic.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}
