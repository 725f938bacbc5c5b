//! A `harp run ...` master in a process of its own, as the process-level elasticity tests
//! drive it: it is started, its stderr is read line by line, `harp scale` talks to it, and
//! the test waits for the job's node list or for a log line.

use crate::{run_process, ProcessOutcome};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a wait for the job to reach a state may take before the test gives up.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// Starts `command` (stdin and stdout null, no backtraces) with its stderr read line by
/// line on a thread of its own: the child, the lines, and the reader, which ends with
/// stderr.
#[allow(clippy::zombie_processes)] // the caller waits for it
pub fn spawn_reading_stderr(
    command: &mut Command,
) -> (Child, mpsc::Receiver<String>, std::thread::JoinHandle<()>) {
    let mut child = command
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, lines, reader)
}

/// A running master whose stderr the test reads.
pub struct MasterProcess {
    /// The `harp` binary it runs (its nodes run the same).
    pub(crate) harp: PathBuf,
    child: Child,
    /// Where it listens (`harp scale --job`, `harp node --join`).
    pub addr: String,
    /// The job's credentials directory it printed.
    pub credentials: PathBuf,
    /// Stderr lines read so far that no wait has consumed.
    seen: std::cell::RefCell<Vec<String>>,
    lines: mpsc::Receiver<String>,
    /// Reads stderr into `lines` until its end (the master and every process that shares
    /// its stderr, e.g. the nodes it started, closed it); taken by [`Self::finish`].
    reader: Option<std::thread::JoinHandle<()>>,
}

impl MasterProcess {
    /// Starts `harp ARGS` and returns once it said where it listens.
    #[allow(clippy::zombie_processes)] // `finish` waits for it
    pub fn start(harp: PathBuf, args: &[&str]) -> MasterProcess {
        let mut command = Command::new(&harp);
        command.args(args);
        let (child, lines, reader) = spawn_reading_stderr(&mut command);
        let mut master = MasterProcess {
            harp,
            child,
            addr: String::new(),
            credentials: PathBuf::new(),
            seen: Default::default(),
            lines,
            reader: Some(reader),
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
    /// while the job has not started, or when this poll's connection timed out (a 2-core
    /// CI machine running the file's other jobs beside this one: the next poll asks again,
    /// and [`Self::wait_for_nodes`] still fails once its patience is over).
    pub fn nodes(&self) -> Option<BTreeSet<u32>> {
        let out = self.scale(&[]);
        if out.stderr.contains("has not started yet") {
            return None;
        }
        if out.stderr.contains("timed out after") {
            eprintln!("harp scale timed out, asking again: {}", out.stderr.trim());
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

    /// `harp RUN_ARGS --nodes NODES`, listening on every interface (for nodes on other
    /// hosts, [`crate::NetHosts`]), its credentials and metrics file (`metrics.jsonl`) in
    /// `dir`.
    pub fn on_every_interface(
        harp: PathBuf,
        run_args: &[&str],
        nodes: &str,
        dir: &Path,
    ) -> MasterProcess {
        let credentials = crate::credentials_in(dir, "on-every-interface");
        let metrics = dir.join("metrics.jsonl");
        let mut master_args = run_args.to_vec();
        master_args.extend(["--nodes", nodes, "--listen", "0.0.0.0:0", "--credentials"]);
        master_args.extend([credentials.to_str().unwrap(), "--metrics-out"]);
        master_args.push(metrics.to_str().unwrap());
        MasterProcess::start(harp, &master_args)
    }

    /// The port it listens on.
    pub fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap()
    }

    /// Starts `command` (`harp`, here or on a host) as `harp node` joining this master at
    /// `join`, with `extra` node options before the run arguments; its stderr piped.
    pub fn join(
        &self,
        mut command: Command,
        join: &str,
        extra: &[&str],
        run_args: &[&str],
    ) -> Child {
        command
            .args(["node", "--join", join, "--credentials"])
            .arg(&self.credentials)
            .args(extra)
            .arg("--")
            .args(run_args);
        crate::spawn_piped(&mut command)
    }

    /// Waits until `harp scale` succeeds, i.e. the job runs and takes new nodes (while it
    /// sets up, the master answers that it is still starting).
    pub fn wait_until_running(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let out = self.scale(&[]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the job never started: {}",
                out.describe()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends the master process signal `name` (`TERM`, `INT`, ...).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the master to exit; its status and the rest of its stderr, every line of
    /// it: the stream is read to its end (which comes once every process writing to it, the
    /// master and the nodes it started, has exited).
    pub fn finish(mut self) -> (ExitStatus, String) {
        let status = self.child.wait().unwrap();
        // The reader may still be behind the exited master: let it read to the end.
        if let Some(reader) = self.reader.take() {
            reader.join().expect("the stderr reader panicked");
        }
        let mut rest = self.seen.take();
        rest.extend(self.lines.try_iter());
        (status, rest.join("\n"))
    }

    /// [`Self::finish`] within `patience`: a master that hangs fails the test instead of
    /// stalling it.
    pub fn finish_within(self, patience: Duration) -> (ExitStatus, String) {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(self.finish());
        });
        rx.recv_timeout(patience)
            .unwrap_or_else(|_| panic!("the master did not exit within {patience:?}"))
    }
}

/// A test that panics before [`MasterProcess::finish`] (a failed wait or assertion) leaves
/// no master behind: it is killed and reaped, and its nodes, which lose it, end too.
impl Drop for MasterProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `finish` returns every line written to the master's stderr, also those its reader
    /// had not passed on when the master was reaped: it used to take only what the reader
    /// had passed on by then, and missed the end. To make that lag certain, a process that
    /// shares the master's stderr (as the nodes it starts do) writes a burst and the last
    /// line only once the master was reaped.
    #[test]
    fn finish_returns_every_line_up_to_the_last() {
        const BURST: usize = 100_000;
        let script = format!(
            "echo 'master listening on 127.0.0.1:9; grow or shrink the job with: harp scale \
             --job 127.0.0.1:9 --credentials /nonexistent --add N' >&2; \
             (while kill -0 $$ 2>/dev/null; do :; done; \
              head -c {BURST} /dev/zero | tr '\\0' '\\n'; echo 'the last line') >&2 &"
        );
        let master = MasterProcess::start("/bin/sh".into(), &["-c", &script]);
        assert_eq!(master.addr, "127.0.0.1:9");
        assert_eq!(master.credentials, PathBuf::from("/nonexistent"));
        let (status, stderr) = master.finish();
        assert!(status.success(), "{status}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(
            (lines.len(), lines.last().copied()),
            (BURST + 2, Some("the last line")),
            "the listening line, {BURST} empty lines and the last one"
        );
        assert!(lines[0].starts_with("master listening on "), "{}", lines[0]);
    }

    /// A master dropped without `finish` (its test panicked) is killed and reaped: before,
    /// it went on running, and its nodes with it.
    #[test]
    fn a_master_dropped_before_it_finished_is_killed() {
        let script = "echo 'master listening on 127.0.0.1:9; grow or shrink the job with: \
                      harp scale --job 127.0.0.1:9 --credentials /nonexistent --add N' >&2; \
                      exec sleep 600";
        let master = MasterProcess::start("/bin/sh".into(), &["-c", script]);
        let proc_dir = PathBuf::from(format!("/proc/{}", master.child.id()));
        assert!(proc_dir.exists(), "the master runs");
        drop(master);
        assert!(!proc_dir.exists(), "the master was killed and reaped");
    }
}
