//! The master's version clock (Litz §4.4).
//!
//! The clock starts at 0 and increases by one every time a completion is handed to the
//! driver. Every dispatched task is tagged with the version current at its dispatch, so a
//! task dispatched after the driver saw completion `c` carries a version `>= c`.

use serde::{Deserialize, Serialize};

/// A value of the version clock.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Version(pub u64);

/// The single, monotonically increasing version counter kept by the master.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionClock {
    current: Version,
}

impl VersionClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Restores a clock at a saved value (checkpoints, master moves).
    pub fn starting_at(version: Version) -> Self {
        Self { current: version }
    }

    /// The version a task dispatched now is tagged with.
    pub fn current(&self) -> Version {
        self.current
    }

    /// Records that one completion is being handed to the driver; returns the new version.
    pub fn on_completion(&mut self) -> Version {
        self.current = Version(self.current.0 + 1);
        self.current
    }
}
