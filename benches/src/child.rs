//! A child process that is killed (and reaped) when its handle is dropped, so a benchmark
//! that stops half-way on an error never leaves a `harp` master or node running (a
//! `scale-in` master trains for 10,000 epochs) to load the machine under the next
//! benchmark.

use std::ops::{Deref, DerefMut};
use std::process::Child;

/// `Child`, killed and waited for on drop; a process that already exited is only reaped.
pub(crate) struct KilledOnDrop(Child);

impl KilledOnDrop {
    pub(crate) fn new(child: Child) -> Self {
        Self(child)
    }
}

impl Deref for KilledOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KilledOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        // An error here means it is already gone: nothing is left to stop.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn dropping_the_handle_kills_a_running_process() {
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        drop(KilledOnDrop::new(child));
        // Killed and reaped: its /proc entry is gone (a running or unreaped process has one).
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} is still there"
        );
    }

    #[test]
    fn a_process_that_already_exited_is_only_reaped() {
        let mut child = KilledOnDrop::new(
            Command::new("true")
                .stdin(Stdio::null())
                .spawn()
                .expect("true runs"),
        );
        let status = child.wait().expect("waits");
        assert!(status.success());
        drop(child);
    }
}
