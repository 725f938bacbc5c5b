//! What a running job tells its caller as it happens: each scale event, injected fault,
//! server recovery, worker recovery and consistent checkpoint, and the checkpoint it
//! resumed from, sent to the channel given with
//! [`ControlInbox::with_events`](super::ControlInbox::with_events) the moment it ends.
//!
//! The same reports come back when the job ends, in [`JobStats`](crate::JobStats) and the
//! [`ConsistentReport`](crate::ConsistentReport); the
//! events are for whoever must not wait for the end: a metrics file that holds them even
//! when the job is stopped or its master killed, a live plot, a test that reacts to a
//! fault. Every event is sent before the job's run function returns.

use super::ScaleEvent;
use crate::consistent::{CheckpointRecord, ResumeRecord};
use crate::scar::{InjectionReport, ServerRecovery, WorkerRecovery};
use tokio::sync::mpsc;

/// One thing that happened in a running job.
#[derive(Clone, Debug)]
pub enum JobEvent {
    /// A node process joined or left the job and its load moved, or a scale command of a
    /// [`JobControl`](crate::JobControl) was carried out or refused (one still unanswered
    /// when the job ends is told as refused).
    Scale(ScaleEvent),
    /// The faults injected at an iteration struck (`ScarOptions::inject`), one event per
    /// fault, when the held micro-tasks are released.
    Fault(InjectionReport),
    /// A failed server's shards were re-created from the running checkpoint.
    ServerRecovered(ServerRecovery),
    /// A dead worker node's executors run again on the live workers. A recovery still
    /// creating executors when the job ends is sent then, as far as it got.
    WorkerRecovered(WorkerRecovery),
    /// A consistent checkpoint that was due is written, failed or was skipped
    /// (`ConsistentOptions::every`; a stopped job's last one too).
    Checkpoint(CheckpointRecord),
    /// The job resumed from this checkpoint (`ConsistentOptions::resume_from`): told before
    /// anything runs.
    Resumed(ResumeRecord),
}

/// Where the runtime sends a job's events: nowhere unless the caller asked for them.
/// Cloned into each part of the job that reports some.
#[derive(Clone, Debug, Default)]
pub(crate) struct EventSink(Option<mpsc::UnboundedSender<JobEvent>>);

impl EventSink {
    pub(crate) fn to(events: mpsc::UnboundedSender<JobEvent>) -> Self {
        Self(Some(events))
    }

    /// Sends `event`, if anyone listens. A receiver that is gone loses nothing the job
    /// needs: the end of the job reports the same.
    pub(crate) fn tell(&self, event: JobEvent) {
        if let Some(events) = &self.0 {
            let _ = events.send(event);
        }
    }
}
