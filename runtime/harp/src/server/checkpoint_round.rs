//! One round of SCAR's checkpoint coordinator over the job's servers (SCAR §5.4.3,
//! "Actions During a Checkpoint"; DESIGN §2.4).
//!
//! [`checkpoint_round`] asks every server for the distance of each of its rows from its
//! saved value (steps 1–2), lets a [`CheckpointSelector`] pick `⌈r·n⌉` of the `n` reported
//! rows (step 3: priority, round-robin, random or full), sends each server the keys it
//! reported that were picked, and collects what they saved (step 4). Servers update their
//! in-memory copy before answering, so training may go on as soon as the round returns; the
//! returned rows are for the caller to write to storage in the background.
//!
//! **Failures.** A server that cannot be reached or cannot measure its rows is left out of
//! the round: its rows are not candidates and keep their saved values, and it is listed in
//! [`RoundOutcome::failed`], while the other servers' rows are measured and saved (a
//! server that failed, or whose node left the job, costs no other server its save). The
//! round fails, having saved nothing, only if no server could report, or if the selection
//! refuses its input. Once saves are sent, rows some servers saved must reach storage even
//! if another server fails, so a failed save is listed in [`RoundOutcome::failed`] too.
//!
//! **Shards that move during a round.** A shard handed off between the two steps may be
//! reported by both its old and its new owner: its keys count once, at the larger distance,
//! and their saves go to every server that reported them. Only the server that owns the
//! shard when the save arrives saves it; a server that gave it away answers it as not owned
//! ([`super::SaveAnswer::not_owned`]). A selected key no server saved is listed in
//! [`RoundOutcome::missed`]; it keeps its distance at its owner and a later round picks it.
//!
//! **Who runs it.** The master (`master/checkpoints.rs`), every
//! `harp_core::scar::checkpoint_schedule(C, r)` iterations, on a task of its own so that it
//! keeps dispatching; servers in node processes are reached through their proxies. Each
//! server's save also reports the save epoch it opened ([`RoundOutcome::epochs`]), which
//! the master keeps beside its image and tells the nodes (`node/lost_ledger.rs`).

use super::{AppliedPart, CheckpointRequest, SaveAnswer, SavedRows, ServerMsg};
use crate::error::HarpError;
use harp_core::scar::{selection_count, CheckpointSelector, ScarError};
use harp_core::{shard_of, CoreError, ParamKey, ServerId, ShardId};
use ractor::ActorRef;
use std::collections::BTreeMap;
use tokio::sync::oneshot;

/// What one checkpoint round did.
#[derive(Debug, Default)]
pub(crate) struct RoundOutcome {
    /// Rows the servers reported (`n`; each key once).
    pub candidates: usize,
    /// Keys the selector picked, ascending: `⌈r·n⌉` of them (all for a full checkpoint).
    pub selected: Vec<ParamKey>,
    /// `(key, value now saved)`, ascending by key: to be written to storage.
    pub saved: SavedRows,
    /// Selected keys no server saved (their shard moved away before the save), ascending.
    pub missed: Vec<ParamKey>,
    /// Servers that saved nothing: left out of the round (they could not report their
    /// distances) or whose save failed.
    pub failed: Vec<(ServerId, HarpError)>,
    /// Each server that saved rows: what it saved, so that nodes can forget the deltas
    /// those saves hold.
    pub server_saves: Vec<ServerSave>,
}

/// One server's save in a round: the save epoch it opened, the keys it saved (ascending),
/// and the flush parts it applied since its last save the master recorded
/// ([`super::applied_parts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerSave {
    pub server: ServerId,
    pub epoch: u64,
    pub keys: Vec<ParamKey>,
    pub applied: Vec<AppliedPart>,
}

impl RoundOutcome {
    /// Bytes of the saved values.
    pub(crate) fn bytes(&self) -> u64 {
        self.saved
            .iter()
            .map(|(_, value)| value.bytes() as u64)
            .sum()
    }
}

/// Shards whose hand-off is not confirmed yet, each with its new owner: the rows that owner
/// reports of them are no candidates of a round. Were the old owner to die before the
/// confirmation, the shard is re-created on the new owner from the image, and the nodes
/// send again what the old owner never acknowledged, some of which the new owner may have
/// applied already (forwarded to it): a save of its rows then would count those twice.
#[derive(Clone, Debug, Default)]
pub(crate) struct InTransit {
    num_shards: u32,
    to: BTreeMap<ShardId, ServerId>,
}

impl InTransit {
    /// `to`: each shard in transit and its new owner, of `num_shards`.
    pub(crate) fn new(num_shards: u32, to: BTreeMap<ShardId, ServerId>) -> Self {
        Self { num_shards, to }
    }

    /// Whether `server`'s report of `key` is left out.
    fn excludes(&self, server: ServerId, key: ParamKey) -> bool {
        !self.to.is_empty() && self.to.get(&shard_of(key, self.num_shards)) == Some(&server)
    }
}

/// Runs one checkpoint round over `servers`, saving the fraction `fraction` (`r`, in
/// `(0, 1]`) of their rows picked by `selector`. See the module doc for what fails the round.
pub(crate) async fn checkpoint_round(
    servers: &[(ServerId, ActorRef<ServerMsg>)],
    selector: &mut CheckpointSelector,
    fraction: f64,
) -> Result<RoundOutcome, HarpError> {
    let nothing_recorded = BTreeMap::new();
    checkpoint_round_except(
        servers,
        selector,
        fraction,
        &InTransit::default(),
        &nothing_recorded,
    )
    .await
}

/// [`checkpoint_round`], leaving out what the new owners of shards `in_transit` report;
/// `recorded`: each server's newest save in the master's image (absent: none), which its
/// save answer then lists no applied part before.
pub(crate) async fn checkpoint_round_except(
    servers: &[(ServerId, ActorRef<ServerMsg>)],
    selector: &mut CheckpointSelector,
    fraction: f64,
    in_transit: &InTransit,
    recorded: &BTreeMap<ServerId, u64>,
) -> Result<RoundOutcome, HarpError> {
    selection_count(0, fraction).map_err(selection_error)?;

    // Steps 1–2: every server's distances, asked of all at once. One that cannot report is
    // left out (listed in `failed`): the round goes on over the others.
    let mut outcome = RoundOutcome::default();
    let mut asked = Vec::with_capacity(servers.len());
    for (index, (id, server)) in servers.iter().enumerate() {
        let (reply, answer) = oneshot::channel();
        let request = ServerMsg::Checkpoint(CheckpointRequest::Distances { reply });
        match server.send_message(request) {
            Ok(()) => asked.push((index, *id, answer)),
            Err(_) => outcome
                .failed
                .push((*id, HarpError::ServerUnreachable(*id))),
        }
    }
    let mut reports = Vec::new();
    for (index, id, answer) in asked {
        match answer.await {
            Ok(Ok(distances)) => reports.extend(
                distances
                    .into_iter()
                    .filter(|(key, _)| !in_transit.excludes(id, *key))
                    .map(|(key, d)| (key, d, index)),
            ),
            Ok(Err(e)) => outcome.failed.push((id, e)),
            Err(_) => outcome.failed.push((id, HarpError::ServerUnreachable(id))),
        }
    }
    if !servers.is_empty() && outcome.failed.len() == servers.len() {
        let (_, first) = outcome.failed.swap_remove(0);
        return Err(first);
    }
    let (candidates, reporters) = merge_reports(reports);

    // Step 3: the selection.
    let selected = selector
        .select(&candidates, fraction)
        .map_err(selection_error)?;

    // Step 4: each server saves the picked keys it reported.
    outcome.candidates = candidates.len();
    let mut saving = Vec::new();
    for (index, keys) in route(&selected, &reporters, servers.len())
        .into_iter()
        .enumerate()
    {
        if keys.is_empty() {
            continue;
        }
        let (id, server) = &servers[index];
        let (reply, answer) = oneshot::channel();
        let recorded = recorded.get(id).copied().unwrap_or(0);
        let request = ServerMsg::Checkpoint(CheckpointRequest::Save {
            keys,
            recorded,
            reply,
        });
        match server.send_message(request) {
            Ok(()) => saving.push((*id, answer)),
            Err(_) => outcome
                .failed
                .push((*id, HarpError::ServerUnreachable(*id))),
        }
    }
    for (id, answer) in saving {
        match answer.await {
            Ok(Ok(SaveAnswer {
                saved,
                not_owned,
                epoch,
                applied,
            })) => {
                if !not_owned.is_empty() {
                    tracing::debug!(server = %id, keys = not_owned.len(), "checkpoint keys no longer on the server that reported them");
                }
                let keys = saved.iter().map(|(key, _)| *key).collect();
                outcome.server_saves.push(ServerSave {
                    server: id,
                    epoch,
                    keys,
                    applied,
                });
                outcome.saved.extend(saved);
            }
            Ok(Err(e)) => outcome.failed.push((id, e)),
            Err(_) => outcome.failed.push((id, HarpError::ServerUnreachable(id))),
        }
    }
    outcome.saved.sort_by_key(|(key, _)| *key); // ascending runs, one per server
    outcome.saved.dedup_by_key(|(key, _)| *key);
    outcome.missed = selected
        .iter()
        .copied()
        .filter(|key| {
            outcome
                .saved
                .binary_search_by_key(key, |(saved, _)| *saved)
                .is_err()
        })
        .collect();
    outcome.selected = selected;
    Ok(outcome)
}

/// `(key, distance)`: what the selector chooses from.
type Candidates = Vec<(ParamKey, f64)>;
/// `(key, index of a server that reported it)`, ascending.
type Reporters = Vec<(ParamKey, usize)>;

/// Merges `(key, distance, server index)` reports into the selector's candidates (each key
/// once, at its largest reported distance, ascending by key) and the `(key, server index)`
/// pairs of who reported what, ascending.
fn merge_reports(mut reports: Vec<(ParamKey, f64, usize)>) -> (Candidates, Reporters) {
    // Each server's report is ascending already: a stable sort merges those runs in
    // linear time (the (key, server) pairs are distinct, so the order is the same).
    reports.sort_by(|a, b| a.0.cmp(&b.0).then(a.2.cmp(&b.2)));
    let mut candidates: Candidates = Vec::with_capacity(reports.len());
    for &(key, distance, _) in &reports {
        match candidates.last_mut() {
            Some((last, largest)) if *last == key => *largest = largest.max(distance),
            _ => candidates.push((key, distance)),
        }
    }
    let reporters = reports
        .into_iter()
        .map(|(key, _, index)| (key, index))
        .collect();
    (candidates, reporters)
}

/// The keys of `selected` each of `servers` servers is asked to save: those it reported
/// (`reporters`, ascending by key).
fn route(
    selected: &[ParamKey],
    reporters: &[(ParamKey, usize)],
    servers: usize,
) -> Vec<Vec<ParamKey>> {
    let mut by_server = vec![Vec::new(); servers];
    for key in selected {
        let first = reporters.partition_point(|(reported, _)| reported < key);
        for &(_, index) in reporters[first..].iter().take_while(|(k, _)| k == key) {
            if let Some(keys) = by_server.get_mut(index) {
                keys.push(*key);
            }
        }
    }
    by_server
}

/// A refused selection as a runtime error: a bad fraction is a configuration error, any
/// other refusal (a broken distance report) an invalid argument.
fn selection_error(error: ScarError) -> HarpError {
    match error {
        ScarError::InvalidFraction(_) => HarpError::InvalidConfig(error.to_string()),
        other => HarpError::Core(CoreError::InvalidArgument(format!(
            "checkpoint selection: {other}"
        ))),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::server::{PartId, PartTag, ServerActor};
    use crate::table::{initial_row, Init, TableSet, UpdateRule};
    use harp_core::scar::{distance, Norm, Selection, SplitMix64};
    use harp_core::{shard_of, RowData, TableId};
    use ractor::Actor;
    use std::collections::{BTreeMap, BTreeSet, HashMap};
    use std::sync::Arc;

    pub(in crate::server) type Servers = Vec<(ServerId, ActorRef<ServerMsg>)>;

    pub(in crate::server) async fn spawn_servers(n: u32, tables: &Arc<TableSet>) -> Servers {
        let mut servers = Vec::new();
        for id in 0..n {
            let args = (ServerId(id), tables.clone());
            let (server, _) = Actor::spawn(None, ServerActor, args).await.unwrap();
            servers.push((ServerId(id), server));
        }
        servers
    }

    pub(in crate::server) async fn apply(
        server: &ActorRef<ServerMsg>,
        updates: Vec<(ParamKey, RowData)>,
    ) {
        let (reply, answer) = oneshot::channel();
        server
            .send_message(ServerMsg::Apply {
                updates,
                part: None,
                reply,
            })
            .unwrap();
        answer.await.unwrap().unwrap();
    }

    /// Reads `keys` (creating them at their initial value).
    pub(in crate::server) async fn touch(server: &ActorRef<ServerMsg>, keys: Vec<ParamKey>) {
        let (reply, answer) = oneshot::channel();
        server.send_message(ServerMsg::Get { keys, reply }).unwrap();
        answer.await.unwrap().unwrap();
    }

    pub(in crate::server) async fn distances(server: &ActorRef<ServerMsg>) -> Vec<(ParamKey, f64)> {
        let (reply, answer) = oneshot::channel();
        let request = CheckpointRequest::Distances { reply };
        server.send_message(ServerMsg::Checkpoint(request)).unwrap();
        answer.await.unwrap().unwrap()
    }

    pub(in crate::server) async fn save(
        server: &ActorRef<ServerMsg>,
        keys: Vec<ParamKey>,
    ) -> SaveAnswer {
        let (reply, answer) = oneshot::channel();
        let request = CheckpointRequest::Save {
            keys,
            recorded: 0,
            reply,
        };
        server.send_message(ServerMsg::Checkpoint(request)).unwrap();
        answer.await.unwrap().unwrap()
    }

    pub(in crate::server) async fn dump(server: &ActorRef<ServerMsg>) -> Vec<(ParamKey, RowData)> {
        let (reply, answer) = oneshot::channel();
        server.send_message(ServerMsg::Dump { reply }).unwrap();
        answer.await.unwrap()
    }

    fn unit(rng: &mut SplitMix64) -> f32 {
        (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A random delta for a row of `kind` and `width`: f32 in [-1, 1), counts in 0..4.
    fn delta(rng: &mut SplitMix64, counters: bool, width: usize) -> RowData {
        if counters {
            RowData::I64((0..width).map(|_| rng.below(4) as i64).collect())
        } else {
            RowData::F32((0..width).map(|_| unit(rng) * 2.0 - 1.0).collect())
        }
    }

    #[tokio::test]
    async fn distances_are_the_scar_distance_of_current_and_saved_values() {
        for seed in 0..30u64 {
            let mut set = TableSet::new();
            let init = Init::Uniform { scale: 0.5, seed };
            let w = set.dense_f32("w", 4, UpdateRule::Add, init).unwrap();
            let adam = UpdateRule::Adam(Default::default());
            let a = set.dense_f32("a", 3, adam, Init::Zeros).unwrap();
            let m = set.dense_f32("m", 2, UpdateRule::Add, init).unwrap();
            let c = set.counters_i64("c", 5).unwrap();
            set.set_norm(a.id(), Norm::L1).unwrap();
            set.set_norm(m.id(), Norm::LInf).unwrap();
            set.set_norm(c.id(), Norm::ScaledTotalVariation).unwrap();
            let set = Arc::new(set);
            let servers = spawn_servers(2, &set).await;
            let owner = |key: ParamKey| &servers[shard_of(key, 2).0 as usize].1;
            let keys: Vec<ParamKey> = [w.id(), a.id(), m.id(), c.id()]
                .iter()
                .flat_map(|&t| (0..12).map(move |r| ParamKey::new(t, r)))
                .collect();
            let mut rng = SplitMix64::new(seed);
            // The test's own record of saved values, taken from dumps.
            let mut saved_model: HashMap<ParamKey, RowData> = HashMap::new();
            for _step in 0..3 {
                for &key in &keys {
                    let spec = set.get(key.table).unwrap();
                    match rng.below(3) {
                        0 => {} // left alone (maybe never created)
                        1 => touch(owner(key), vec![key]).await,
                        _ => {
                            let d = delta(&mut rng, key.table == c.id(), spec.width);
                            apply(owner(key), vec![(key, d)]).await;
                        }
                    }
                }
                for (_, server) in &servers {
                    let current = dump(server).await;
                    let expected: Vec<(ParamKey, f64)> = current
                        .iter()
                        .map(|(key, value)| {
                            let spec = set.get(key.table).unwrap();
                            let saved = saved_model
                                .get(key)
                                .cloned()
                                .unwrap_or_else(|| initial_row(spec, key.row));
                            (*key, distance(spec.norm, value, &saved).unwrap())
                        })
                        .collect();
                    assert_eq!(distances(server).await, expected, "seed {seed}");
                    assert!(expected.iter().any(|(_, d)| *d > 0.0), "seed {seed}");

                    // Save a random half of the rows it holds; the answer is their values.
                    let chosen: Vec<ParamKey> = current
                        .iter()
                        .filter(|_| rng.below(2) == 0)
                        .map(|(key, _)| *key)
                        .collect();
                    let answer = save(server, chosen.clone()).await;
                    assert!(answer.not_owned.is_empty());
                    let values: BTreeMap<ParamKey, RowData> = current.into_iter().collect();
                    assert_eq!(answer.saved.len(), chosen.len());
                    for (key, value) in answer.saved {
                        assert_eq!(*value, values[&key], "seed {seed} {key}");
                        saved_model.insert(key, values[&key].clone());
                    }
                }
            }
        }
    }

    /// One f32 table of width 2; rows `0..moved` get distinct distances (row `r` moves by
    /// `r + 1` in L2), rows `moved..rows` are only read (distance 0). Rows are spread over
    /// `servers` by shard.
    async fn spread_rows(servers: &Servers, rows: u64, moved: u64) -> Vec<ParamKey> {
        let n = servers.len() as u32;
        let keys: Vec<ParamKey> = (0..rows).map(|r| ParamKey::new(TableId(0), r)).collect();
        for &key in &keys {
            let server = &servers[shard_of(key, n).0 as usize].1;
            if key.row < moved {
                let step = key.row as f32 + 1.0;
                apply(
                    server,
                    vec![(key, RowData::F32(vec![step * 0.6, step * 0.8]))],
                )
                .await;
            } else {
                touch(server, vec![key]).await;
            }
        }
        keys
    }

    fn one_table() -> Arc<TableSet> {
        let mut set = TableSet::new();
        set.dense_f32("w", 2, UpdateRule::Add, Init::Zeros).unwrap();
        Arc::new(set)
    }

    async fn all_distances(servers: &Servers) -> BTreeMap<ParamKey, f64> {
        let mut all = BTreeMap::new();
        for (_, server) in servers {
            for (key, d) in distances(server).await {
                assert!(all.insert(key, d).is_none(), "{key} reported twice");
            }
        }
        all
    }

    #[tokio::test]
    async fn a_priority_round_saves_exactly_the_largest_distances() {
        let set = one_table();
        let servers = spawn_servers(3, &set).await;
        spread_rows(&servers, 40, 30).await;
        let before = all_distances(&servers).await;
        let mut selector = CheckpointSelector::new(Selection::Priority);
        let outcome = checkpoint_round(&servers, &mut selector, 0.2)
            .await
            .unwrap();

        // ⌈0.2 · 40⌉ = 8: rows 22..30 moved the farthest (distance r + 1).
        assert_eq!(outcome.candidates, 40);
        let expected: Vec<ParamKey> = (22..30).map(|r| ParamKey::new(TableId(0), r)).collect();
        assert_eq!(outcome.selected, expected);
        assert_eq!(
            outcome.saved.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            expected
        );
        assert!(outcome.missed.is_empty() && outcome.failed.is_empty());
        assert_eq!(outcome.bytes(), 8 * 2 * 4);
        let mut current = BTreeMap::new();
        for (_, server) in &servers {
            current.extend(dump(server).await);
        }
        for (key, value) in &outcome.saved {
            assert_eq!(**value, current[key]);
        }

        let after = all_distances(&servers).await;
        assert_eq!(after.len(), before.len());
        for (key, d) in after {
            if expected.contains(&key) {
                assert_eq!(d, 0.0, "{key} was saved");
            } else {
                assert_eq!(d, before[&key], "{key} was not saved");
            }
        }
    }

    #[tokio::test]
    async fn round_robin_saves_every_row_in_one_over_r_rounds() {
        let set = one_table();
        let servers = spawn_servers(2, &set).await;
        let keys = spread_rows(&servers, 10, 4).await;
        let mut selector = CheckpointSelector::new(Selection::RoundRobin);
        // r = 0.3: ⌈0.3 · 10⌉ = 3 rows a round, all 10 in ⌈1 / 0.3⌉ = 4 rounds, not 3.
        let mut seen = BTreeSet::new();
        for round in 1..=4 {
            let outcome = checkpoint_round(&servers, &mut selector, 0.3)
                .await
                .unwrap();
            assert_eq!(outcome.candidates, 10, "rows at distance 0 count too");
            assert_eq!(outcome.saved.len(), 3);
            seen.extend(outcome.saved.iter().map(|(k, _)| *k));
            if round == 3 {
                assert_eq!(seen.len(), 9);
            }
        }
        assert_eq!(seen, keys.into_iter().collect());
        assert!(all_distances(&servers).await.values().all(|d| *d == 0.0));
    }

    /// A server that cannot report (here: stopped, as a proxy of a node that left or died)
    /// is left out of the round, and the others' rows are measured and saved.
    #[tokio::test]
    async fn a_server_that_cannot_report_is_left_out_and_the_others_save() {
        let set = one_table();
        let servers = spawn_servers(3, &set).await;
        spread_rows(&servers, 30, 30).await;
        let gone = servers[1].1.clone();
        gone.stop(None);
        while gone.get_status() != ractor::ActorStatus::Stopped {
            tokio::task::yield_now().await;
        }
        let live = vec![servers[0].clone(), servers[2].clone()];
        let before = all_distances(&live).await;
        let mut selector = CheckpointSelector::new(Selection::Full);
        let outcome = checkpoint_round(&servers, &mut selector, 1.0)
            .await
            .expect("the other servers' round");

        assert_eq!(outcome.candidates, before.len());
        let saved: Vec<ParamKey> = outcome.saved.iter().map(|(k, _)| *k).collect();
        assert_eq!(saved, before.keys().copied().collect::<Vec<_>>());
        assert!(!saved.is_empty());
        let failed: Vec<ServerId> = outcome.failed.iter().map(|(id, _)| *id).collect();
        assert_eq!(failed, [ServerId(1)]);
        assert!(matches!(
            outcome.failed[0].1,
            HarpError::ServerUnreachable(ServerId(1))
        ));
        assert!(all_distances(&live).await.values().all(|d| *d == 0.0));
    }

    /// A round in which no server could report fails, and says why.
    #[tokio::test]
    async fn a_round_no_server_reports_to_fails() {
        let set = one_table();
        let servers = spawn_servers(2, &set).await;
        for (_, server) in &servers {
            server.stop(None);
            while server.get_status() != ractor::ActorStatus::Stopped {
                tokio::task::yield_now().await;
            }
        }
        let mut selector = CheckpointSelector::new(Selection::Full);
        let err = checkpoint_round(&servers, &mut selector, 1.0).await;
        assert!(
            matches!(err, Err(HarpError::ServerUnreachable(_))),
            "{err:?}"
        );
        assert_eq!(selector.rounds(), 0);
    }

    #[tokio::test]
    async fn a_bad_fraction_fails_the_round_before_anything_is_saved() {
        let set = one_table();
        let servers = spawn_servers(1, &set).await;
        spread_rows(&servers, 4, 4).await;
        let mut selector = CheckpointSelector::new(Selection::Priority);
        for bad in [0.0, 1.5, f64::NAN] {
            let err = checkpoint_round(&servers, &mut selector, bad).await;
            assert!(matches!(err, Err(HarpError::InvalidConfig(_))), "{err:?}");
        }
        assert_eq!(selector.rounds(), 0);
        assert!(all_distances(&servers).await.values().all(|d| *d > 0.0));
    }

    #[test]
    fn a_key_reported_twice_counts_once_and_is_saved_wherever_it_was_reported() {
        let k = |row| ParamKey::new(TableId(0), row);
        // Key 2's shard moved from server 0 to server 1 between their two reports.
        let reports = vec![
            (k(3), 1.0, 1),
            (k(2), 4.0, 1),
            (k(1), 2.0, 0),
            (k(2), 5.0, 0),
        ];
        let (candidates, reporters) = merge_reports(reports);
        assert_eq!(candidates, vec![(k(1), 2.0), (k(2), 5.0), (k(3), 1.0)]);
        assert_eq!(reporters, vec![(k(1), 0), (k(2), 0), (k(2), 1), (k(3), 1)]);
        let routes = route(&[k(2), k(3)], &reporters, 2);
        assert_eq!(routes, vec![vec![k(2)], vec![k(2), k(3)]]);
    }

    /// The save epoch: a part applied at epoch `a` is in a row's save at epoch `e` exactly
    /// when `a < e`; each save opens the next epoch, and the round reports it per server,
    /// with the named parts applied since the server's last save the master recorded.
    #[tokio::test]
    async fn applies_are_acknowledged_with_the_save_epoch_each_save_opens() {
        let set = one_table();
        let servers = spawn_servers(2, &set).await;
        let key = ParamKey::new(TableId(0), 0);
        let (id, s0) = &servers[shard_of(key, 2).0 as usize];
        let part = |seq| PartId { node: 7, seq };
        let applied_at = |server: ActorRef<ServerMsg>, seq| async move {
            let (reply, answer) = oneshot::channel();
            let delta = vec![(key, RowData::F32(vec![1.0, 1.0]))];
            server
                .send_message(ServerMsg::Apply {
                    updates: delta,
                    part: Some(PartTag {
                        id: part(seq),
                        held_from: 0,
                        forwarded: false,
                    }),
                    reply,
                })
                .unwrap();
            answer.await.unwrap().unwrap()
        };
        assert_eq!(applied_at(s0.clone(), 0).await, Some(0));
        let first = save(s0, vec![key]).await;
        assert_eq!(first.epoch, 1);
        let at = |seq, epoch| AppliedPart {
            part: part(seq),
            epoch,
        };
        assert_eq!(first.applied, vec![at(0, 0)]);
        assert_eq!(applied_at(s0.clone(), 1).await, Some(1));
        assert_eq!(applied_at(s0.clone(), 2).await, Some(1));
        let mut selector = CheckpointSelector::new(Selection::Full);
        // The master's image holds save 1, whose answer listed part 0.
        let recorded = BTreeMap::from([(*id, 1)]);
        let no_transit = InTransit::default();
        let outcome = checkpoint_round_except(&servers, &mut selector, 1.0, &no_transit, &recorded)
            .await
            .unwrap();
        // The other server holds no row: it saved nothing and reports no epoch.
        let save_2 = ServerSave {
            server: *id,
            epoch: 2,
            keys: vec![key],
            applied: vec![at(1, 1), at(2, 1)],
        };
        assert_eq!(outcome.server_saves, vec![save_2]);
        assert_eq!(applied_at(s0.clone(), 3).await, Some(2));
        // Save 2's answer was lost: the next save lists its parts again.
        let third = save(s0, vec![key]).await;
        assert_eq!(third.applied, vec![at(1, 1), at(2, 1), at(3, 2)]);
    }

    /// A shard whose hand-off is not confirmed: its new owner's rows of it are no
    /// candidates (see [`InTransit`]); its old owner's, and every other shard's, are.
    #[tokio::test]
    async fn the_new_owners_rows_of_a_shard_in_transit_are_left_out() {
        let set = one_table();
        let servers = spawn_servers(2, &set).await;
        // Shard `i` (of 2) on server `i`.
        spread_rows(&servers, 40, 40).await;
        let before = all_distances(&servers).await;
        let on = |shard: u32| {
            before
                .keys()
                .copied()
                .filter(|k| shard_of(*k, 2) == ShardId(shard))
                .collect::<Vec<_>>()
        };
        // Shard 1 on its way to server 1 (its holder here), shard 0 to server 1 too (which
        // holds none of it: server 0's rows of it count).
        let in_transit = InTransit::new(
            2,
            BTreeMap::from([(ShardId(1), ServerId(1)), (ShardId(0), ServerId(1))]),
        );
        let mut selector = CheckpointSelector::new(Selection::Full);
        let no_record = BTreeMap::new();
        let outcome =
            checkpoint_round_except(&servers, &mut selector, 1.0, &in_transit, &no_record)
                .await
                .unwrap();
        let saved: Vec<ParamKey> = outcome.saved.iter().map(|(k, _)| *k).collect();
        assert_eq!(saved, on(0));
        assert_eq!(outcome.candidates, on(0).len());
        assert!(!on(1).is_empty());
    }
}
