//! The counter's verdict on a job that lost parameters: what its end must be after the
//! faults and recoveries its `JobStats` report (DESIGN §4).
//!
//! Without a loss every row equals its expected sum ([`super::CounterApp::verify`]). A
//! server recovered from SCAR's running checkpoint loses what its shards applied after
//! their last saved values (G3), and an injected `lose` or `reset` fault loses the rows it
//! chose; increments are positive, so a loss can only lower a row. The verdict therefore
//! holds every row of a shard no recovery named to its exact sum (G2, G4: nothing lost,
//! nothing applied twice) and every row a loss may have touched to at most its sum; where
//! every recovery reported the updates it lost (`LostValues::lost_sum`) and no fault was
//! injected, the rows must miss exactly that many increments. An injected perturbation
//! moves rows anywhere: the rows are then not checked, and the verdict says so.

use super::CounterApp;
use harp::{JobStats, ParamDump, ParamKey};
use std::collections::{BTreeMap, BTreeSet};

/// What the rows of a job's end came to.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Verdict {
    /// Rows with an expected sum.
    pub rows: usize,
    /// Of them, rows at exactly that sum.
    pub exact: usize,
    /// Rows below their sum, each where a loss was allowed.
    pub below: usize,
    /// Increments those rows miss, in all.
    pub missing: i64,
    /// The increments the recoveries reported lost, where every one of them did.
    pub reported_lost: Option<i64>,
    /// Why the rows were not checked (an injected perturbation), if they were not.
    pub unchecked: Option<String>,
}

impl Verdict {
    /// One line for the terminal, after `counter: N tasks, `.
    pub fn describe(&self) -> String {
        if let Some(why) = &self.unchecked {
            return format!("{} rows not checked ({why})", self.rows);
        }
        if self.below == 0 {
            return format!("{} rows exact", self.rows);
        }
        let reported = match self.reported_lost {
            Some(lost) => format!(", which is what the recoveries reported lost ({lost})"),
            None => String::new(),
        };
        format!(
            "{} rows: {} exact, {} below their sums where a loss is allowed, missing {} \
             increments in all{reported}; none above",
            self.rows, self.exact, self.below, self.missing
        )
    }
}

/// Where the job's reports allow a row to be below its sum.
pub(super) enum Allowed {
    /// No loss: every row exact.
    Nowhere,
    /// Rows of these shards (of `shards`): servers recovered from the running checkpoint.
    Shards(BTreeSet<u32>, u32),
    /// Any row: an injected loss or reset chose rows the report does not name.
    Anywhere,
}

impl Allowed {
    fn of(stats: &JobStats) -> Result<Allowed, String> {
        if stats
            .injections
            .iter()
            .any(|i| i.fault == "lose" || i.fault == "reset-to-initial")
        {
            return Ok(Allowed::Anywhere);
        }
        if stats.recoveries.is_empty() {
            return Ok(Allowed::Nowhere);
        }
        if stats.shards == 0 {
            return Err("the job reported recoveries but no shards".into());
        }
        let lost = stats.recoveries.iter();
        let shards = lost.flat_map(|r| r.shards.iter().map(|(shard, _)| *shard));
        Ok(Allowed::Shards(shards.collect(), stats.shards))
    }

    fn row(&self, app: &CounterApp, row: u64) -> bool {
        match self {
            Allowed::Nowhere => false,
            Allowed::Anywhere => true,
            Allowed::Shards(lost, shards) => {
                let key = ParamKey::new(app.counters().id(), row);
                lost.contains(&harp::shard_of(key, *shards).0)
            }
        }
    }
}

/// The verdict on `params` at the end of a job whose driver expects `expected` (its
/// rows' sums) and whose reports are `stats`: `Err` with the first differences where a row is above its sum, or
/// below it where no loss was allowed, or where the rows miss other than the reported
/// loss.
pub(super) fn verdict(
    app: &CounterApp,
    expected: &BTreeMap<u64, Vec<i64>>,
    params: &ParamDump,
    stats: &JobStats,
) -> Result<Verdict, String> {
    if let Some(perturb) = stats.injections.iter().find(|i| i.fault == "perturb") {
        return Ok(Verdict {
            rows: expected.len(),
            exact: 0,
            below: 0,
            missing: 0,
            reported_lost: None,
            unchecked: Some(format!(
                "a perturbation was injected at iteration {}",
                perturb.at_iteration
            )),
        });
    }
    check(
        app,
        expected,
        params,
        &Allowed::of(stats)?,
        reported_lost(stats),
    )
}

/// Every row against its expected sum, below it only where `allowed`, the rows missing
/// `reported_lost` increments in all where that is known.
pub(super) fn check(
    app: &CounterApp,
    expected: &BTreeMap<u64, Vec<i64>>,
    params: &ParamDump,
    allowed: &Allowed,
    reported_lost: Option<i64>,
) -> Result<Verdict, String> {
    let mut errors = Vec::new();
    let (mut exact, mut below, mut missing) = (0, 0, 0i64);
    for (row, want) in expected {
        let got = params.row(app.counters(), *row);
        let got = got.unwrap_or(&[]);
        if got == want.as_slice() {
            exact += 1;
        } else if !allowed.row(app, *row) || got.len() != want.len() {
            errors.push(format!("row {row}: expected {want:?}, found {got:?}"));
        } else if got.iter().zip(want).any(|(g, w)| g > w) {
            errors.push(format!(
                "row {row}: above its expected sum after a loss (an update applied twice?): \
                 expected at most {want:?}, found {got:?}"
            ));
        } else {
            below += 1;
            missing += want.iter().zip(got).map(|(w, g)| w - g).sum::<i64>();
        }
    }
    for (row, got) in params.table(app.counters()) {
        if !expected.contains_key(&row) && got.iter().any(|v| *v != 0) {
            errors.push(format!("row {row}: expected no updates, found {got:?}"));
        }
    }
    if let Some(lost) = reported_lost.filter(|lost| *lost != missing) {
        errors.push(format!(
            "the recoveries reported {lost} increments lost, but the rows miss {missing}"
        ));
    }
    if !errors.is_empty() {
        let total = errors.len();
        errors.truncate(10);
        return Err(format!(
            "{total} counter rows differ from their expected sums:\n  {}",
            errors.join("\n  ")
        ));
    }
    Ok(Verdict {
        rows: expected.len(),
        exact,
        below,
        missing,
        reported_lost,
        unchecked: None,
    })
}

/// The increments every recovery reported lost, where all of them did and nothing else
/// lost rows (no injected fault).
fn reported_lost(stats: &JobStats) -> Option<i64> {
    if stats.recoveries.is_empty() || !stats.injections.is_empty() {
        return None;
    }
    let sums: Option<Vec<f64>> = stats
        .recoveries
        .iter()
        .map(|r| r.lost.as_ref().map(|l| l.lost_sum))
        .collect();
    Some(sums?.iter().sum::<f64>().round() as i64)
}

#[cfg(test)]
#[path = "verdict_tests.rs"]
mod tests;
