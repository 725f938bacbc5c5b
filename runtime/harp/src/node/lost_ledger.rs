//! What a node process keeps so that a dead server's lost updates are known exactly
//! (issue: "the recovery report's lost updates equal exactly the difference between the
//! expected and the final parameter values").
//!
//! When a server dies, its shards come back from the running checkpoint's image, so every
//! update it applied after a row's last save is lost. Its values at the failure died with
//! its process; the updates did not: the nodes that sent them still know them. So each node
//! keeps, per server and row, the deltas the server *acknowledged*, summed by the server's
//! save epoch at their apply (`Message::Applied::save_epoch`; `server/mod.rs`). A delta
//! applied at epoch `a` is in the saved value of a row saved at epoch `e` exactly when
//! `a < e`. On the death the master asks every node for its record of the dead server and
//! keeps, per row, the sums at epochs at or after the row's save in its image
//! (`master/recovery.rs`): that is exactly what the row lost.
//!
//! **Memory.** The master tells the nodes after each round which rows each server saved at
//! which epoch (`Message::RowsSaved`, sent once the saves are in the image, so a node never
//! forgets a delta the image lacks). A saved row's earlier sums are dropped, and every other
//! row's sums before that epoch are merged into one: a later save of the row holds them all
//! or none. A row thus keeps one sum plus one per save not yet reported (rounds run one at a
//! time): about one dense copy of the rows the node updates on recoverable servers.
//!
//! **What is not exact.** Only tables whose rule is `Add` are kept (a gradient under Adam or
//! AdaGrad does not sum into the lost value). A part acknowledged without an epoch (staged
//! for a worker-recovery job, or partly forwarded to a shard's new owner by a move) makes
//! the server's record inexact, and the node says so instead of answering a wrong sum.
//! Unacknowledged parts are not kept here: the node sends them again to the shards' new
//! owners, less the rows a save after the part's apply holds (`node/unacked.rs`).
//!
//! **Fenced at the report.** A server the master declared dead may still answer (cut off
//! from the master only): once the node reported its record for the recovery
//! ([`LostLedger::report_and_fence`]) it takes no more acknowledgements from it, and sends
//! such parts again to the new owners, so every update is either in the report or applied
//! by a live server.

use harp_core::{ParamKey, RowData, ServerId};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One server's record: per row, the acknowledged deltas summed by save epoch.
#[derive(Debug, Default)]
struct ServerRecord {
    rows: HashMap<ParamKey, BTreeMap<u64, RowData>>,
    /// Why this record cannot be exact, once it cannot.
    inexact: Option<String>,
}

/// Per server, what it acknowledged of this node's updates since each row's last save.
#[derive(Debug, Default)]
pub(crate) struct LostLedger {
    servers: HashMap<ServerId, ServerRecord>,
    /// Servers whose record was reported for their recovery ([`Self::report_and_fence`]):
    /// their acknowledgements are refused from then on ([`Self::acknowledged`]; kept after
    /// [`Self::forget`]).
    fenced: HashSet<ServerId>,
}

/// A row's deltas by save epoch, ascending: what a node reports of a dead server.
pub(crate) type RowsByEpoch = Vec<(ParamKey, Vec<(u64, RowData)>)>;

impl LostLedger {
    /// `server` acknowledged `part` as applied at save epoch `epoch`: its rows for which
    /// `kept` holds (those of `Add` tables) go into the record, or the whole part comes back
    /// when the acknowledgement is refused: the server was fenced by
    /// [`Self::report_and_fence`], and the part must go again to its shards' new owners.
    pub(crate) fn acknowledged(
        &mut self,
        server: ServerId,
        epoch: Option<u64>,
        mut part: Vec<(ParamKey, RowData)>,
        kept: impl Fn(&ParamKey) -> bool,
    ) -> Result<(), Vec<(ParamKey, RowData)>> {
        if self.fenced.contains(&server) {
            return Err(part);
        }
        part.retain(|(key, _)| kept(key));
        self.record(server, epoch, part);
        Ok(())
    }

    /// `server` acknowledged `updates` (all of them, of `Add` tables only) as applied at save
    /// epoch `epoch` (`None`: not all by itself, so the record is inexact from now on).
    fn record(&mut self, server: ServerId, epoch: Option<u64>, updates: Vec<(ParamKey, RowData)>) {
        let record = self.servers.entry(server).or_default();
        if record.inexact.is_some() {
            return;
        }
        let Some(epoch) = epoch else {
            record.inexact = Some(format!(
                "{server} acknowledged a flush part it did not apply all by itself (a shard moved)"
            ));
            record.rows.clear();
            return;
        };
        for (key, delta) in updates {
            let sums = record.rows.entry(key).or_default();
            let added = match sums.get_mut(&epoch) {
                Some(sum) => sum.add_assign(&delta).is_ok(),
                None => {
                    sums.insert(epoch, delta);
                    true
                }
            };
            if !added {
                // The server checked the delta against the row; this cannot happen.
                record.inexact = Some(format!("{key}: a delta of another kind or width"));
                record.rows.clear();
                return;
            }
        }
    }

    /// `server`'s save at epoch `epoch` of `keys` is in the checkpoint's image: forget what
    /// those rows gained before it, and merge every other row's sums before it into one.
    pub(crate) fn rows_saved(&mut self, server: ServerId, epoch: u64, keys: &[ParamKey]) {
        let Some(record) = self.servers.get_mut(&server) else {
            return;
        };
        for key in keys {
            if let Some(sums) = record.rows.get_mut(key) {
                *sums = sums.split_off(&epoch);
            }
        }
        for sums in record.rows.values_mut() {
            let later = sums.split_off(&epoch);
            let earlier = std::mem::replace(sums, later);
            let mut merged: Option<RowData> = None;
            for (_, delta) in earlier {
                match merged.as_mut() {
                    Some(sum) => {
                        // Same row: same kind and width.
                        let _ = sum.add_assign(&delta);
                    }
                    None => merged = Some(delta),
                }
            }
            if let Some(merged) = merged {
                // Before `epoch`: a later save holds all of it or none of it.
                sums.insert(epoch.saturating_sub(1), merged);
            }
        }
        record.rows.retain(|_, sums| !sums.is_empty());
    }

    /// What this node knows `server` acknowledged since each row's last save it was told
    /// of, or why it cannot say exactly.
    pub(crate) fn report(&self, server: ServerId) -> Result<RowsByEpoch, String> {
        let Some(record) = self.servers.get(&server) else {
            return Ok(Vec::new());
        };
        if let Some(why) = &record.inexact {
            return Err(why.clone());
        }
        let mut rows: RowsByEpoch = record
            .rows
            .iter()
            .map(|(key, sums)| {
                let sums = sums.iter().map(|(e, d)| (*e, d.clone())).collect();
                (*key, sums)
            })
            .collect();
        rows.sort_unstable_by_key(|(key, _)| *key);
        Ok(rows)
    }

    /// [`Self::report`] for the recovery of `server`, which the job declared dead, and
    /// from now on refuse its acknowledgements ([`Self::record`]). A server cut off from
    /// the master only still answers this node until the reroutes arrive; what it
    /// acknowledges after the report is in no report and, applied only there, dies with
    /// it: this node sends it again to the shards' new owners instead.
    pub(crate) fn report_and_fence(&mut self, server: ServerId) -> Result<RowsByEpoch, String> {
        self.fenced.insert(server);
        self.report(server)
    }

    /// `server` is gone and its loss reported: forget its record.
    pub(crate) fn forget(&mut self, server: ServerId) {
        self.servers.remove(&server);
    }
}

/// What a row lost, from every node's report of its dead server: the sum of the deltas at
/// save epochs at or after `saved_epoch` (the epoch of the row's save in the image, 0 when
/// it was never saved). `None` when no node reports a delta there.
pub(crate) fn lost_since(reports: &[(u64, RowData)], saved_epoch: u64) -> Option<RowData> {
    let mut lost: Option<RowData> = None;
    for (epoch, delta) in reports {
        if *epoch < saved_epoch {
            continue;
        }
        match lost.as_mut() {
            Some(sum) => {
                let _ = sum.add_assign(delta);
            }
            None => lost = Some(delta.clone()),
        }
    }
    lost
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp_core::TableId;

    fn key(row: u64) -> ParamKey {
        ParamKey::new(TableId(0), row)
    }

    fn one(row: u64, v: i64) -> Vec<(ParamKey, RowData)> {
        vec![(key(row), RowData::I64(vec![v]))]
    }

    fn lost(ledger: &LostLedger, server: ServerId, row: u64, saved_epoch: u64) -> i64 {
        let report = ledger.report(server).unwrap();
        report
            .iter()
            .find(|(k, _)| *k == key(row))
            .and_then(|(_, sums)| lost_since(sums, saved_epoch))
            .map_or(0, |d| d.as_i64().unwrap()[0])
    }

    /// A model of one server: applies at its current epoch, saves chosen rows. The ledger
    /// must always report exactly what each row gained after its last save.
    #[test]
    fn the_reported_loss_is_what_each_row_gained_after_its_last_save() {
        let s = ServerId(1);
        for seed in 0..200u64 {
            let mut rng = harp_core::scar::SplitMix64::new(seed);
            let mut ledger = LostLedger::default();
            let rows = 5u64;
            let mut value = vec![0i64; rows as usize];
            let mut saved = vec![0i64; rows as usize];
            let mut saved_epoch = vec![0u64; rows as usize];
            let mut epoch = 0u64;
            // A save taken but not yet reported to the node: (epoch, rows).
            let mut unreported: Option<(u64, Vec<u64>)> = None;
            for _ in 0..60 {
                match rng.next_u64() % 6 {
                    0 if unreported.is_none() => {
                        epoch += 1;
                        let picked: Vec<u64> = (0..rows)
                            .filter(|_| rng.next_u64().is_multiple_of(2))
                            .collect();
                        for &r in &picked {
                            saved[r as usize] = value[r as usize];
                            saved_epoch[r as usize] = epoch;
                        }
                        unreported = Some((epoch, picked));
                    }
                    1 => {
                        if let Some((e, picked)) = unreported.take() {
                            let keys: Vec<ParamKey> = picked.iter().map(|r| key(*r)).collect();
                            ledger.rows_saved(s, e, &keys);
                        }
                    }
                    _ => {
                        let r = rng.next_u64() % rows;
                        let d = (rng.next_u64() % 7) as i64 - 3;
                        value[r as usize] += d;
                        ledger.record(s, Some(epoch), one(r, d));
                    }
                }
                for r in 0..rows {
                    assert_eq!(
                        lost(&ledger, s, r, saved_epoch[r as usize]),
                        value[r as usize] - saved[r as usize],
                        "seed {seed}, row {r}"
                    );
                }
            }
        }
    }

    #[test]
    fn memory_stays_bounded_by_reported_saves() {
        let s = ServerId(0);
        let mut ledger = LostLedger::default();
        for epoch in 0..50u64 {
            ledger.record(s, Some(epoch), one(1, 1));
            ledger.record(s, Some(epoch), one(2, 1));
            ledger.rows_saved(s, epoch + 1, &[key(2)]);
        }
        let report = ledger.report(s).unwrap();
        // Row 2 was saved after each delta: nothing kept. Row 1 never: one merged sum.
        assert_eq!(report.len(), 1, "{report:?}");
        assert_eq!(report[0].1.len(), 1);
        assert_eq!(lost(&ledger, s, 1, 0), 50);
    }

    #[test]
    fn a_part_without_an_epoch_makes_the_record_inexact() {
        let s = ServerId(3);
        let mut ledger = LostLedger::default();
        ledger.record(s, Some(0), one(1, 4));
        ledger.record(s, None, one(1, 1));
        ledger.record(s, Some(0), one(1, 4));
        let why = ledger.report(s).unwrap_err();
        assert!(why.contains(&ServerId(3).to_string()), "{why}");
        // Other servers are not affected; a forgotten one reports nothing.
        ledger.record(ServerId(4), Some(2), one(1, 4));
        assert_eq!(lost(&ledger, ServerId(4), 1, 2), 4);
        assert_eq!(lost(&ledger, ServerId(4), 1, 3), 0);
        ledger.forget(ServerId(4));
        assert!(ledger.report(ServerId(4)).unwrap().is_empty());
    }

    #[test]
    fn a_reported_server_is_fenced_and_its_later_acknowledgements_refused() {
        let s = ServerId(2);
        let all = |_: &ParamKey| true;
        let mut ledger = LostLedger::default();
        assert_eq!(ledger.acknowledged(s, Some(1), one(1, 5), all), Ok(()));
        let report = ledger.report_and_fence(s).unwrap();
        assert_eq!(report.len(), 1);
        // Acknowledged after the report: refused whole, and in no later report either.
        assert_eq!(
            ledger.acknowledged(s, Some(1), one(1, 7), all),
            Err(one(1, 7))
        );
        assert_eq!(
            ledger.acknowledged(s, Some(2), one(3, 1), |_| false),
            Err(one(3, 1))
        );
        assert_eq!(lost(&ledger, s, 1, 0), 5);
        assert_eq!(lost(&ledger, s, 3, 0), 0);
        // Forgetting the record keeps the fence; other servers are not fenced, and only
        // their kept rows are recorded.
        ledger.forget(s);
        assert!(ledger.acknowledged(s, Some(3), one(1, 1), all).is_err());
        let mut two = one(1, 1);
        two.extend(one(2, 1));
        let only_row_1 = |k: &ParamKey| k.row == 1;
        assert_eq!(
            ledger.acknowledged(ServerId(0), Some(3), two, only_row_1),
            Ok(())
        );
        assert_eq!(lost(&ledger, ServerId(0), 1, 0), 1);
        assert_eq!(lost(&ledger, ServerId(0), 2, 0), 0);
    }
}
