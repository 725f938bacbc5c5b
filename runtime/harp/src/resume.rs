//! Resuming a job from its newest complete consistent checkpoint (`--resume DIR`): opening
//! the directory for the app, loading and verifying the checkpoint (a damaged one is passed
//! over for the previous one, with a warning), checking it against the job's layout,
//! decoding its files ([`ResumePoint`]), and putting its rows into the servers before
//! anything runs. `job.rs` builds the executors and driver from it and the master routes
//! its held micro-tasks (`master/consistent.rs`).

use crate::app::App;
use crate::consistent::{
    executor_file, CheckpointLayout, CheckpointMeta, ResumeRecord, DRIVER_FILE, HELD_FILE,
    META_FORMAT, ROWS_FILE,
};
use crate::error::HarpError;
use crate::master::Held;
use crate::server::checkpoint_round::{checkpoint_round, RoundOutcome};
use crate::server::{reset_on_servers, RowsToReset, ServerMsg};
use crate::table::TableSet;
use harp_checkpoint::{CheckpointStore, LoadedCheckpoint};
use harp_core::scar::{CheckpointSelector, Selection};
use harp_core::{ExecutorId, ParamKey, RowData, ServerId, ShardMap};
use ractor::ActorRef;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// A loaded, verified and decoded checkpoint.
pub(crate) struct ResumePoint<Args> {
    /// The store it came from (it adopted the stored job id).
    pub store: CheckpointStore,
    pub meta: CheckpointMeta,
    pub driver: Vec<u8>,
    pub held: Held<Args>,
    /// Every executor's saved state, by id.
    pub executors: BTreeMap<ExecutorId, Vec<u8>>,
    pub rows: Vec<(ParamKey, RowData)>,
    pub record: ResumeRecord,
}

/// Loads the newest complete checkpoint of `app` in `dir` for a job shaped `layout` (see
/// [`CheckpointLayout::refusals`]: its numbers of workers and servers may differ).
pub(crate) fn load<A: App>(
    app: &A,
    dir: &Path,
    keep: usize,
    layout: CheckpointLayout,
) -> Result<ResumePoint<A::Args>, HarpError> {
    let store = CheckpointStore::open_for_resume(dir, app.name(), keep)?;
    let loaded = store.load_latest()?;
    let skipped: Vec<(u64, String)> = store
        .skipped()
        .into_iter()
        .map(|s| (s.seq, s.reason.to_string()))
        .collect();
    for (seq, why) in &skipped {
        tracing::warn!(seq, reason = %why, "resume passes over a damaged checkpoint");
    }
    let seq = loaded.seq();
    let mismatch = |what: String| HarpError::ResumeMismatch {
        dir: dir.to_path_buf(),
        seq,
        what,
    };
    let meta: CheckpointMeta = serde_json::from_value(loaded.metadata().clone()).map_err(|e| {
        mismatch(format!(
            "its metadata is not a harp consistent checkpoint ({e})"
        ))
    })?;
    if meta.format != META_FORMAT {
        return Err(mismatch(format!(
            "format {} (this harp reads format {META_FORMAT})",
            meta.format
        )));
    }
    let refusals = meta.layout.refusals(&layout);
    if !refusals.is_empty() {
        return Err(mismatch(format!(
            "the job's layout differs ({}); give the checkpointed job's --executors-per-worker and --shards-per-server (the numbers of workers, servers and processes may differ)",
            refusals.join("; ")
        )));
    }
    if (meta.layout.workers, meta.layout.servers) != (layout.workers, layout.servers) {
        tracing::info!(
            checkpoint_workers = meta.layout.workers,
            checkpoint_servers = meta.layout.servers,
            workers = layout.workers,
            servers = layout.servers,
            executors = meta.layout.num_executors(),
            shards = meta.layout.num_shards(),
            "resuming on another number of workers or servers: the checkpoint's executors and shards are spread over this job's"
        );
    }
    let driver = loaded.read(DRIVER_FILE)?;
    let held: Held<A::Args> = postcard::from_bytes(&loaded.read(HELD_FILE)?).map_err(|e| {
        mismatch(format!(
            "its held micro-tasks are not {}'s task arguments ({e})",
            app.name()
        ))
    })?;
    let rows: Vec<(ParamKey, RowData)> = postcard::from_bytes(&loaded.read(ROWS_FILE)?)
        .map_err(|e| mismatch(format!("its parameter rows do not decode ({e})")))?;
    rows_fit_tables(&rows, app.tables()).map_err(mismatch)?;
    let executors = read_executors(&loaded, meta.layout, &mismatch)?;
    let record = ResumeRecord {
        dir: dir.to_path_buf(),
        seq,
        version: meta.version,
        skipped,
    };
    tracing::info!(seq, iteration = meta.iteration, dir = %dir.display(), "resuming from consistent checkpoint");
    Ok(ResumePoint {
        store,
        meta,
        driver,
        held,
        executors,
        rows,
        record,
    })
}

/// Whether every checkpointed row fits the table this job declares for it (its kind and
/// width); otherwise what differs, for the first row that does not.
fn rows_fit_tables(rows: &[(ParamKey, RowData)], tables: &TableSet) -> Result<(), String> {
    for (key, row) in rows {
        let Ok(spec) = tables.get(key.table) else {
            return Err(format!(
                "its rows include table {}, which this job does not declare",
                key.table.0
            ));
        };
        if (spec.kind, spec.width) != (row.kind(), row.width()) {
            return Err(format!(
                "its table '{}' holds rows of {} {:?} values, and this job's rows of {} {:?} values: \
                 the checkpoint was written with other data or model options (a dataset with \
                 other features or classes, another --rank or --topics, ...)",
                spec.name,
                row.width(),
                row.kind(),
                spec.width,
                spec.kind
            ));
        }
    }
    Ok(())
}

fn read_executors(
    loaded: &LoadedCheckpoint,
    layout: CheckpointLayout,
    mismatch: &dyn Fn(String) -> HarpError,
) -> Result<BTreeMap<ExecutorId, Vec<u8>>, HarpError> {
    let mut executors = BTreeMap::new();
    for id in 0..layout.num_executors() {
        let name = executor_file(id);
        if loaded.info().file(&name).is_none() {
            return Err(mismatch(format!("it holds no state for executor {id}")));
        }
        executors.insert(ExecutorId(id), loaded.read(&name)?);
    }
    Ok(executors)
}

/// A resumed job with SCAR's running checkpoint, once its rows are restored: one full round
/// (every row saved at its resumed value), so that the master's image and the servers'
/// saved copies start from the resumed rows; otherwise a failure before the rounds caught
/// up would restore rows to their initial values. Fails if any server did not save.
pub(crate) async fn seed_image(
    servers: &BTreeMap<ServerId, ActorRef<ServerMsg>>,
) -> Result<RoundOutcome, HarpError> {
    let servers: Vec<(ServerId, ActorRef<ServerMsg>)> =
        servers.iter().map(|(id, s)| (*id, s.clone())).collect();
    let mut selector = CheckpointSelector::new(Selection::Full);
    let outcome = checkpoint_round(&servers, &mut selector, 1.0).await?;
    if let Some((server, error)) = outcome.failed.first() {
        return Err(HarpError::Remote(format!(
            "{server} could not save the resumed rows into the running checkpoint: {error}"
        )));
    }
    Ok(outcome)
}

/// Puts `rows` into the servers that own their shards (before anything runs).
pub(crate) async fn restore_rows(
    servers: &BTreeMap<ServerId, ActorRef<ServerMsg>>,
    shards: &ShardMap,
    rows: Vec<(ParamKey, RowData)>,
) -> Result<(), HarpError> {
    let mut per_server: BTreeMap<ServerId, RowsToReset> = BTreeMap::new();
    for (key, value) in rows {
        per_server
            .entry(shards.server_of_key(key))
            .or_default()
            .push((key, Some(Arc::new(value))));
    }
    let mut resets = Vec::with_capacity(per_server.len());
    for (id, rows) in per_server {
        let server = servers.get(&id).ok_or(HarpError::ServerUnreachable(id))?;
        resets.push((id, server.clone(), rows));
    }
    reset_on_servers(resets).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Init, UpdateRule};

    /// A checkpoint's rows against this job's tables: each must have its table's kind and
    /// width, and a table the job does not declare is named.
    #[test]
    fn rows_of_another_shape_are_named_by_their_table() {
        let mut tables = TableSet::new();
        let w = tables
            .dense_f32("mlr.w", 4, UpdateRule::Add, Init::Zeros)
            .unwrap();
        let row = |width| RowData::F32(vec![0.0; width]);
        let fits = [(ParamKey::new(w.id(), 0), row(4))];
        assert_eq!(rows_fit_tables(&fits, &tables), Ok(()));
        let wider = [
            (ParamKey::new(w.id(), 0), row(4)),
            (ParamKey::new(w.id(), 1), row(7)),
        ];
        let why = rows_fit_tables(&wider, &tables).unwrap_err();
        assert!(
            why.starts_with(
                "its table 'mlr.w' holds rows of 7 F32 values, and this job's rows of 4 F32 values"
            ),
            "{why}"
        );
        let counters = [(ParamKey::new(w.id(), 0), RowData::I64(vec![0; 4]))];
        let why = rows_fit_tables(&counters, &tables).unwrap_err();
        assert!(
            why.contains("4 I64 values, and this job's rows of 4 F32"),
            "{why}"
        );
        let unknown = [(ParamKey::new(harp_core::TableId(9), 0), row(4))];
        let why = rows_fit_tables(&unknown, &tables).unwrap_err();
        assert_eq!(
            why,
            "its rows include table 9, which this job does not declare"
        );
    }
}
