//! What SIGTERM and SIGINT (Ctrl-C) do to a `harp` process.
//!
//! - **The master** ([`stop_on_signals`]): the job stops cleanly ([`harp::JobControl::stop`]:
//!   every node process is told the job ended and exits, a checkpoint being written is
//!   finished, the master's temporary credentials are removed). The exit status of a stopped
//!   run is 128 + the signal's number, as if the signal had ended it ([`stopped_by`]).
//! - **A node** ([`StopSignals`] in `harp node`, installed before it loads its data): it
//!   leaves the job gracefully (its load moves to the other nodes) and exits 0; one asked
//!   while it still starts leaves as soon as the job runs, and one asked before it has
//!   loaded its data exits without joining.
//!
//! In both, the same signal again ends the process at once. Node processes the master
//! starts run in a process group of their own, so that a Ctrl-C in the terminal reaches the
//! master only, which then ends them through the job.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that stopped the job, 0 while none did.
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);

/// The number of the signal that stopped the job, if one did.
pub fn stopped_by() -> Option<i32> {
    match STOPPED_BY.load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal),
    }
}

/// Stops the job through `control` at the first SIGTERM or SIGINT. Never completes where
/// signals are unavailable.
pub(crate) async fn stop_on_signals(control: harp::JobControl) {
    let (number, name) = first_stop_signal().await;
    STOPPED_BY.store(number, Ordering::Relaxed);
    eprintln!("harp: got {name}: stopping the job (send it again to end at once)");
    control.stop(format!("the master got {name}"));
}

/// Completes at the first SIGTERM or SIGINT with its number and name; from then on, the
/// next one ends the process at once. Never completes where signals are unavailable.
pub(crate) async fn first_stop_signal() -> (i32, &'static str) {
    match StopSignals::install() {
        Some(signals) => signals.first().await,
        None => std::future::pending().await,
    }
}

/// SIGTERM's and SIGINT's handlers, installed: from then on neither ends the process by its
/// default action.
pub(crate) struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the handlers now (inside a tokio runtime), or `None` where signals are
    /// unavailable.
    pub(crate) fn install() -> Option<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let term = signal(SignalKind::terminate()).ok()?;
            let interrupt = signal(SignalKind::interrupt()).ok()?;
            return Some(Self { term, interrupt });
        }
        #[allow(unreachable_code)]
        None
    }

    /// Completes at the first SIGTERM or SIGINT since the handlers were installed, with its
    /// number and name; from then on, the next one ends the process at once.
    pub(crate) async fn first(self) -> (i32, &'static str) {
        #[cfg(unix)]
        {
            let Self {
                mut term,
                mut interrupt,
            } = self;
            let first = next_signal(&mut term, &mut interrupt).await;
            // Installing the handlers took the signals' default action away for good.
            tokio::spawn(async move {
                let (number, name) = next_signal(&mut term, &mut interrupt).await;
                eprintln!("harp: got {name} again: ending at once");
                std::process::exit(128 + number);
            });
            return first;
        }
        #[allow(unreachable_code)]
        std::future::pending().await
    }
}

/// The next SIGTERM or SIGINT: its number and name.
#[cfg(unix)]
async fn next_signal(
    term: &mut tokio::signal::unix::Signal,
    interrupt: &mut tokio::signal::unix::Signal,
) -> (i32, &'static str) {
    tokio::select! {
        _ = term.recv() => (signal_number::SIGTERM, "SIGTERM"),
        _ = interrupt.recv() => (signal_number::SIGINT, "SIGINT"),
    }
}

/// The POSIX numbers of the two signals (the same on every Unix harp runs on).
#[cfg(unix)]
mod signal_number {
    pub const SIGINT: i32 = 2;
    pub const SIGTERM: i32 = 15;
}
