//! The end-of-run check that LDA's tables hold exactly the executors' topic assignments
//! (`harp run lda --check-counts`, [`LdaApp::check_tables`]): every word–topic count equals
//! the number of tokens of that word the executors hold in that topic, and the topic-totals
//! row written last equals the per-topic sums (the rows are double buffered: the other one
//! holds the totals a sub-round earlier). It is what every resync promises, so it is the
//! oracle of the recovery tests across processes (a lost server, a dead worker node).

use super::{LdaApp, LdaDriver};
use harp::ParamDump;
use std::collections::BTreeMap;

/// Mismatches listed in a failed check before the rest are only counted.
const MISMATCHES_LISTED: usize = 5;

/// The first [`MISMATCHES_LISTED`] mismatches, described, and how many there were (a table
/// that is wrong everywhere costs a count, not a string per value).
#[derive(Default)]
struct Mismatches {
    listed: Vec<String>,
    count: usize,
}

impl Mismatches {
    fn add(&mut self, describe: impl FnOnce() -> String) {
        if self.listed.len() < MISMATCHES_LISTED {
            self.listed.push(describe());
        }
        self.count += 1;
    }

    /// `None` when there were none.
    fn into_report(mut self) -> Option<String> {
        if self.count == 0 {
            return None;
        }
        if self.count > self.listed.len() {
            self.listed
                .push(format!("and {} more", self.count - self.listed.len()));
        }
        Some(self.listed.join("\n"))
    }
}

impl LdaApp {
    /// Compares the tables in `params` with the executors' own counts that `driver`
    /// gathered after the last iteration ([`LdaDriver::token_counts`], with
    /// [`super::LdaConfig::report_counts`]). Returns the number of tokens counted, or which
    /// counts differ.
    pub fn check_tables(&self, params: &ParamDump, driver: &LdaDriver) -> Result<u64, String> {
        let token_counts: &BTreeMap<(u32, u32), u64> = driver.token_counts();
        if token_counts.is_empty() {
            return Err(
                "the executors reported no counts (LdaConfig::report_counts is off)".into(),
            );
        }
        let k = self.config.topics;
        let words_per_row = self.rows.words_per_row();
        let mut mismatches = Mismatches::default();
        let mut seen = 0usize;
        for (row, values) in params.table(&self.word_topic) {
            for (i, &held) in values.iter().enumerate() {
                let word = (row as usize * words_per_row + i / k) as u32;
                let topic = (i % k) as u32;
                let own = token_counts.get(&(word, topic)).copied().unwrap_or(0);
                if own > 0 {
                    seen += 1;
                }
                if i128::from(held) != i128::from(own) {
                    mismatches.add(|| {
                        format!("word {word} topic {topic}: the table holds {held}, the executors' tokens {own}")
                    });
                }
            }
        }
        if seen < token_counts.len() {
            mismatches.add(|| {
                format!(
                    "{} (word, topic) counts of the executors are in no row of the table",
                    token_counts.len() - seen
                )
            });
        }
        let mut totals = vec![0i64; k];
        for (&(word, topic), &n) in token_counts.iter() {
            match totals.get_mut(topic as usize) {
                Some(total) => *total += n as i64,
                None => mismatches
                    .add(|| format!("word {word}: an executor holds topic {topic} (K = {k})")),
            }
        }
        let row = driver.current_totals_row();
        let held = params.row(&self.topic_totals, row).unwrap_or(&[]);
        if held != totals.as_slice() {
            mismatches.add(|| {
                format!("topic totals row {row}: {held:?}, the executors' tokens {totals:?}")
            });
        }
        match mismatches.into_report() {
            None => Ok(totals.iter().sum::<i64>() as u64),
            Some(report) => Err(report),
        }
    }
}
