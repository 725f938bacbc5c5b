//! [`JobIdentity`]: which job and which app a checkpoint directory belongs to.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The owner of a checkpoint directory: a job (by id or name) of an app.
///
/// `create` refuses a directory holding checkpoints of another identity; a resumed job may
/// have a new job id, so `open_for_resume` checks only the app and adopts the stored job id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct JobIdentity {
    /// The job's id or name (e.g. a u128 job id in hex).
    pub job_id: String,
    /// The app's name.
    pub app: String,
}

impl JobIdentity {
    /// An identity from a job id and an app name.
    pub fn new(job_id: impl Into<String>, app: impl Into<String>) -> Self {
        Self {
            job_id: job_id.into(),
            app: app.into(),
        }
    }
}

impl fmt::Display for JobIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job {:?} of app {:?}", self.job_id, self.app)
    }
}
