//! A node process a test started with its log at info level, read line by line, for the
//! tests that watch where a node is (an executor's move, a hand-off) from its log.

use crate::{spawn_reading_stderr, wait_exit, MasterProcess, PATIENCE};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::Instant;

/// A node process the test started with its log at info level (`HARP_LOG`), whose stderr the
/// test reads line by line: the phases of an executor's move are logged there, so the test
/// sees where a move is. Killed if the test ends while it still runs.
pub struct LoggedNode {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line read so far, in order.
    log: Vec<String>,
    /// How many lines of `log` the waits have gone past.
    consumed: usize,
}

impl LoggedNode {
    pub fn start(master: &MasterProcess, run_args: &[&str]) -> LoggedNode {
        Self::start_as(master, "both", run_args)
    }

    /// A node with `harp node --role ROLE`.
    pub fn start_as(master: &MasterProcess, role: &str, run_args: &[&str]) -> LoggedNode {
        Self::start_with_env(master, role, run_args, &[])
    }

    /// The same, with these variables in its environment too.
    pub fn start_with_env(
        master: &MasterProcess,
        role: &str,
        run_args: &[&str],
        env: &[(&str, &str)],
    ) -> LoggedNode {
        // The master's own binary.
        let mut command = Command::new(&master.harp);
        command
            .envs(env.iter().copied())
            .args(["node", "--join", &master.addr, "--credentials"])
            .arg(&master.credentials)
            .args(["--role", role])
            .arg("--")
            .args(run_args)
            .env("HARP_LOG", "warn,harp=info");
        let (child, lines, _reader) = spawn_reading_stderr(&mut command);
        LoggedNode {
            child,
            lines,
            log: Vec::new(),
            consumed: 0,
        }
    }

    /// Keeps a line of the log, which goes to a pipe here: plain text, no colour codes (the
    /// node colours its log only on a terminal).
    fn push(&mut self, line: String) {
        assert!(
            !line.contains('\x1b'),
            "a log written to a pipe has colour codes: {line:?}"
        );
        self.log.push(line);
    }

    /// The next line (after the last one a wait returned) that has every one of `parts`.
    pub fn wait_for_line(&mut self, parts: &[&str]) -> String {
        let matches = |line: &String| parts.iter().all(|p| line.contains(p));
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(i) = self.log[self.consumed..].iter().position(matches) {
                self.consumed += i + 1;
                return self.log[self.consumed - 1].clone();
            }
            self.consumed = self.log.len();
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.push(line),
                Err(_) => panic!(
                    "the node never logged a line with {parts:?}; it logged:\n{}",
                    self.log.join("\n")
                ),
            }
        }
    }

    /// SIGKILLs the process (the fault a test injects).
    pub fn kill(&mut self) {
        self.child.kill().expect("could not kill the node process");
    }

    /// Waits (a bounded time) for the process to exit; its status and its whole log.
    pub fn exit(mut self, what: &str) -> (std::process::ExitStatus, String) {
        let status = wait_exit(&mut self.child, what);
        // The process is gone, so its stderr reaches its end: every line it wrote is read.
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}'s stderr never closed"),
            }
        }
        (status, std::mem::take(&mut self.log).join("\n"))
    }
}

impl Drop for LoggedNode {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
