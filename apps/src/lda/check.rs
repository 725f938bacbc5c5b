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
        let mut mismatches = Vec::new();
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
                    mismatches.push(format!(
                        "word {word} topic {topic}: the table holds {held}, the executors' tokens {own}"
                    ));
                }
            }
        }
        if seen < token_counts.len() {
            mismatches.push(format!(
                "{} (word, topic) counts of the executors are in no row of the table",
                token_counts.len() - seen
            ));
        }
        let mut totals = vec![0i64; k];
        for (&(_, topic), &n) in token_counts.iter() {
            if let Some(total) = totals.get_mut(topic as usize) {
                *total += n as i64;
            }
        }
        let row = driver.current_totals_row();
        let held = params.row(&self.topic_totals, row).unwrap_or(&[]);
        if held != totals.as_slice() {
            mismatches.push(format!(
                "topic totals row {row}: {held:?}, the executors' tokens {totals:?}"
            ));
        }
        if mismatches.is_empty() {
            return Ok(totals.iter().sum::<i64>() as u64);
        }
        let more = mismatches.len().saturating_sub(MISMATCHES_LISTED);
        mismatches.truncate(MISMATCHES_LISTED);
        if more > 0 {
            mismatches.push(format!("and {more} more"));
        }
        Err(mismatches.join("\n"))
    }
}
