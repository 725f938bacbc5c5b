//! What a node process must share with the job's master to take part: the app's name, its
//! parameter tables and its settings ([`AppIdentity`]). The master puts them in its
//! `Welcome`; a node started for another app, for the same app with other tables (`--rows
//! 200` where the job has 100, a counter of width 3 where the job's is 4, another seed of a
//! table's random initial values) or with other settings (`App::settings`: `--lr 5` where
//! the job's is 0.5) refuses to go on and says which table or setting differs. Such a node
//! used to join, and its reads and updates of rows of another shape corrupted the job or
//! failed it later with a consistency violation; other settings trained it differently.

use crate::app::App;
use crate::error::HarpError;
use crate::table::TableSet;
use harp_wire::{JobId, Message, Welcome, PROTOCOL_VERSION};

/// An app as the nodes of one job must all see it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct AppIdentity {
    pub name: String,
    /// One line per table: its name, number, kind, width, update rule, initial values and
    /// norm.
    pub tables: Vec<String>,
    /// [`App::settings`].
    pub settings: Vec<String>,
}

impl AppIdentity {
    pub(crate) fn of<A: App>(app: &A) -> Self {
        Self {
            name: app.name().to_string(),
            tables: describe(app.tables()),
            settings: app.settings(),
        }
    }

    /// The master's `Welcome` to node `node` of job `job`.
    pub(crate) fn welcome(&self, job: JobId, node: u32, lease_timeout_ms: u64) -> Message {
        Message::Welcome(Welcome {
            protocol_version: PROTOCOL_VERSION,
            job_id: job,
            assigned_node_id: node,
            app_name: self.name.clone(),
            app_tables: self.tables.clone(),
            app_settings: self.settings.clone(),
            lease_timeout_ms,
            heartbeat_interval_ms: super::lease::heartbeat_interval_ms(lease_timeout_ms),
        })
    }

    /// Whether a node of this app may join the job whose master sent `welcome`; why not.
    pub(crate) fn check(&self, welcome: &Welcome) -> Result<(), HarpError> {
        if welcome.app_name != self.name {
            return Err(HarpError::Remote(format!(
                "the job runs app '{}', this node was started for '{}'",
                welcome.app_name, self.name
            )));
        }
        first_difference(
            "parameter tables",
            "no such table",
            &welcome.app_tables,
            &self.tables,
        )?;
        first_difference(
            "settings",
            "no such setting",
            &welcome.app_settings,
            &self.settings,
        )
    }
}

/// Whether the job's lines of `what` equal this node's; an error naming the first line that
/// differs (`missing` where one side has no such line) otherwise.
fn first_difference(
    what: &str,
    missing: &str,
    job: &[String],
    node: &[String],
) -> Result<(), HarpError> {
    let Some(differs) = (0..job.len().max(node.len())).find(|&i| job.get(i) != node.get(i)) else {
        return Ok(());
    };
    let shown = |line: Option<&String>| line.map_or(missing.to_string(), Clone::clone);
    Err(HarpError::Remote(format!(
        "this node's {what} differ from the job's (start it with the job's run arguments): \
         the job has [{}], this node [{}]",
        shown(job.get(differs)),
        shown(node.get(differs))
    )))
}

/// One line per table of `tables`, in table order.
fn describe(tables: &TableSet) -> Vec<String> {
    tables
        .iter()
        .map(|t| {
            format!(
                "'{}' (table {}): {:?} rows of width {}, {:?}, initial {:?}, norm {:?}",
                t.name, t.id.0, t.kind, t.width, t.rule, t.init, t.norm
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Init, UpdateRule};

    fn identity(width: usize, seed: u64) -> AppIdentity {
        let mut tables = TableSet::new();
        tables
            .dense_f32("w", 4, UpdateRule::Add, Init::Zeros)
            .unwrap();
        tables
            .dense_f32(
                "b",
                width,
                UpdateRule::Add,
                Init::Uniform { scale: 1.0, seed },
            )
            .unwrap();
        AppIdentity {
            name: "app".into(),
            tables: describe(&tables),
            settings: vec!["lr 0.5".into(), "batch 100".into()],
        }
    }

    fn welcome_of(master: &AppIdentity) -> Welcome {
        match master.welcome(JobId::default(), 1, 3000) {
            Message::Welcome(w) => w,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_node_with_the_jobs_tables_joins() {
        let master = identity(3, 7);
        assert!(master.check(&welcome_of(&master)).is_ok());
    }

    #[test]
    fn a_node_whose_tables_differ_names_the_table() {
        let master = welcome_of(&identity(3, 7));
        for (node, differs) in [(identity(2, 7), "width 2"), (identity(3, 8), "seed: 8")] {
            let error = node.check(&master).unwrap_err().to_string();
            assert!(error.contains("tables differ from the job's"), "{error}");
            assert!(error.contains("'b' (table 1)"), "{error}");
            assert!(error.contains(differs), "{error}");
        }
        let mut fewer = identity(3, 7);
        fewer.tables.pop();
        let error = fewer.check(&master).unwrap_err().to_string();
        assert!(error.contains("this node [no such table]"), "{error}");
    }

    #[test]
    fn a_node_whose_settings_differ_names_the_setting() {
        let master = welcome_of(&identity(3, 7));
        let mut node = identity(3, 7);
        node.settings[1] = "batch 10".into();
        let error = node.check(&master).unwrap_err().to_string();
        assert!(
            error.contains("this node's settings differ from the job's")
                && error.contains("the job has [batch 100], this node [batch 10]"),
            "{error}"
        );
        node.settings.truncate(1);
        let error = node.check(&master).unwrap_err().to_string();
        assert!(error.contains("this node [no such setting]"), "{error}");
    }

    #[test]
    fn a_node_of_another_app_is_refused() {
        let master = welcome_of(&identity(3, 7));
        let mut other = identity(3, 7);
        other.name = "other".into();
        let error = other.check(&master).unwrap_err().to_string();
        assert!(error.contains("the job runs app 'app'"), "{error}");
    }
}
