//! A `harp run ...` master in a process of its own, as the process-level elasticity tests
//! drive it: it is started, its stderr is read line by line, `harp scale` talks to it, and
//! the test waits for the job's node list or for a log line.

use crate::{run_process, ProcessOutcome};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a wait for the job to reach a state may take before the test gives up.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// A running master whose stderr the test reads.
pub struct MasterProcess {
    harp: PathBuf,
    child: Child,
    /// Where it listens (`harp scale --job`, `harp node --join`).
    pub addr: String,
    /// The job's credentials directory it printed.
    pub credentials: PathBuf,
    /// Stderr lines read so far that no wait has consumed.
    seen: std::cell::RefCell<Vec<String>>,
    lines: mpsc::Receiver<String>,
}

impl MasterProcess {
    /// Starts `harp ARGS` and returns once it said where it listens.
    #[allow(clippy::zombie_processes)] // `finish` waits for it
    pub fn start(harp: PathBuf, args: &[&str]) -> MasterProcess {
        let mut child = Command::new(&harp)
            .args(args)
            .env("RUST_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut master = MasterProcess {
            harp,
            child,
            addr: String::new(),
            credentials: PathBuf::new(),
            seen: Default::default(),
            lines,
        };
        let line = master.wait_for_line(&["master listening on "]);
        let rest = line.split("master listening on ").nth(1).unwrap();
        master.addr = rest.split(';').next().unwrap().trim().to_string();
        let creds = rest.split("--credentials ").nth(1).unwrap();
        master.credentials = creds.split(' ').next().unwrap().into();
        // The same line may say more (e.g. the key the master follows) for a later wait.
        master.seen.borrow_mut().insert(0, line);
        master
    }

    /// Runs `harp scale --job ADDR --credentials DIR ARGS`.
    pub fn scale(&self, args: &[&str]) -> ProcessOutcome {
        let cred = self.credentials.to_str().unwrap();
        let mut all = vec!["scale", "--job", &self.addr, "--credentials", cred];
        all.extend_from_slice(args);
        run_process(&self.harp, all)
    }

    /// The ids of the job's nodes that are not leaving, as `harp scale` lists them; `None`
    /// while the job has not started.
    pub fn nodes(&self) -> Option<BTreeSet<u32>> {
        let out = self.scale(&[]);
        if out.stderr.contains("has not started yet") {
            return None;
        }
        assert!(out.status.success(), "{}", out.describe());
        let listed = out.stdout.trim().trim_start_matches("nodes:").to_string();
        let staying = listed.split("), ").filter(|n| !n.contains("leaving"));
        Some(
            staying
                .filter_map(|n| n.split_whitespace().next()?.parse().ok())
                .collect(),
        )
    }

    /// Waits until the node list is `expected`.
    pub fn wait_for_nodes(&self, expected: &BTreeSet<u32>) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let now = self.nodes();
            if now.as_ref() == Some(expected) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the job's nodes are {now:?}, expected {expected:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The first stderr line (read before or now) that has every one of `parts`; the lines
    /// before it that did not match stay available to later waits.
    pub fn wait_for_line(&self, parts: &[&str]) -> String {
        let matches = |line: &String| parts.iter().all(|p| line.contains(p));
        {
            let mut seen = self.seen.borrow_mut();
            if let Some(i) = seen.iter().position(matches) {
                return seen.remove(i);
            }
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "the master never logged a line with {parts:?}; it logged:\n{}",
                    self.seen.borrow().join("\n")
                )
            });
            if matches(&line) {
                return line;
            }
            self.seen.borrow_mut().push(line);
        }
    }

    /// Waits for the master to exit; its status and the rest of its stderr.
    pub fn finish(mut self) -> (ExitStatus, String) {
        let status = self.child.wait().unwrap();
        let mut rest = self.seen.take();
        rest.extend(self.lines.try_iter());
        (status, rest.join("\n"))
    }
}
