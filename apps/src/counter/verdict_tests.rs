//! The counter's verdict against hand-made ends of a job: where a loss is allowed, what it
//! may do, and what the reports must agree with.

use super::*;
use crate::counter::CounterConfig;
use harp::{
    CheckpointStats, FaultTiming, InjectionReport, LostValues, NodeStats, RowData, ServerRecovery,
    ServerStats,
};

const SHARDS: u32 = 8;

fn app() -> CounterApp {
    CounterApp::new(CounterConfig::default()).unwrap()
}

fn stats(recoveries: Vec<ServerRecovery>, injections: Vec<InjectionReport>) -> JobStats {
    JobStats {
        tasks_completed: 0,
        final_version: 0,
        elapsed_s: 0.0,
        cached_rows: 0,
        node: NodeStats::default(),
        servers: ServerStats::default(),
        nodes_counted: 1,
        nodes_counted_from_reports: 0,
        checkpoints: CheckpointStats::default(),
        recoveries,
        worker_recoveries: Vec::new(),
        injections,
        shards: SHARDS,
    }
}

/// Server `server` recovered with shard `shard`, having reported `lost` increments lost.
fn recovery(shard: u32, lost: Option<f64>) -> ServerRecovery {
    ServerRecovery {
        server: 1,
        shards: vec![(shard, 0)],
        rows_restored: 0,
        bytes_restored: 0,
        detected_at_s: 0.0,
        duration_s: 0.0,
        lost: lost.map(|lost_sum| LostValues {
            tables: Vec::new(),
            lost_sum,
        }),
    }
}

fn injection(fault: &'static str) -> InjectionReport {
    InjectionReport {
        event: "fault",
        at_iteration: 3,
        fault,
        recovery: None,
        rows_chosen: 1,
        rows_replaced: 1,
        perturbation_l2: 1.0,
        timing: FaultTiming::default(),
        image_round: None,
    }
}

fn shard(app: &CounterApp, row: u64) -> u32 {
    harp::shard_of(ParamKey::new(app.counters().id(), row), SHARDS).0
}

/// Rows 0..16, row r expected at [r + 10, 5]; the end as expected but for `changes`.
fn end(app: &CounterApp, changes: &[(u64, [i64; 2])]) -> (BTreeMap<u64, Vec<i64>>, ParamDump) {
    let expected: BTreeMap<u64, Vec<i64>> = (0..16).map(|r| (r, vec![r as i64 + 10, 5])).collect();
    let mut params = ParamDump::default();
    for (row, want) in &expected {
        let got = changes
            .iter()
            .find(|(r, _)| r == row)
            .map_or_else(|| want.clone(), |(_, v)| v.to_vec());
        params
            .rows
            .insert(ParamKey::new(app.counters().id(), *row), RowData::I64(got));
    }
    (expected, params)
}

/// The verdict on [`end`] with `changes`, after `recoveries` and `injections`.
fn judge(
    changes: &[(u64, [i64; 2])],
    recoveries: Vec<ServerRecovery>,
    injections: Vec<InjectionReport>,
) -> Result<Verdict, String> {
    let app = app();
    let (expected, params) = end(&app, changes);
    verdict(&app, &expected, &params, &stats(recoveries, injections))
}

/// `text` contains `part`, or the test fails showing both.
fn says(text: &str, part: &str) {
    assert!(text.contains(part), "{part:?} not in: {text}");
}

#[test]
fn without_a_loss_every_row_must_be_exact() {
    let v = judge(&[], vec![], vec![]).unwrap();
    assert_eq!((v.rows, v.exact, v.below, v.missing), (16, 16, 0, 0));
    assert_eq!(v.describe(), "16 rows exact");
    let e = judge(&[(3, [12, 5])], vec![], vec![]).unwrap_err();
    says(&e, "row 3: expected [13, 5], found [12, 5]");
}

#[test]
fn a_recovered_shards_rows_may_be_below_and_the_others_must_be_exact() {
    let app = app();
    let lost = shard(&app, 3);
    let other = (0..16).find(|r| shard(&app, *r) != lost).unwrap();
    // Row 3 misses 1 + 2 increments: allowed, counted, and equal to the report.
    let row_3_below = [(3, [12, 3])];
    let v = judge(&row_3_below, vec![recovery(lost, Some(3.0))], vec![]).unwrap();
    let counts = (v.exact, v.below, v.missing, v.reported_lost);
    assert_eq!(counts, (15, 1, 3, Some(3)));
    says(&v.describe(), "missing 3 increments");
    says(&v.describe(), "reported lost (3)");
    // The same without a report of the loss: allowed, not compared.
    let v = judge(&row_3_below, vec![recovery(lost, None)], vec![]).unwrap();
    assert_eq!((v.below, v.reported_lost), (1, None));
    // A report that disagrees with the rows.
    let e = judge(&row_3_below, vec![recovery(lost, Some(4.0))], vec![]).unwrap_err();
    says(&e, "reported 4 increments lost, but the rows miss 3");
    // A row of another shard below its sum: a loss nothing allowed.
    let e = judge(&[(other, [0, 5])], vec![recovery(lost, None)], vec![]).unwrap_err();
    says(&e, &format!("row {other}: expected"));
}

#[test]
fn a_row_above_its_sum_fails_even_where_a_loss_is_allowed() {
    let lost = shard(&app(), 3);
    let row_3_above = [(3, [12, 6])];
    let e = judge(&row_3_above, vec![recovery(lost, None)], vec![]).unwrap_err();
    says(&e, "row 3: above its expected sum after a loss");
    let e = judge(&row_3_above, vec![], vec![injection("lose")]).unwrap_err();
    says(&e, "row 3: above its expected sum");
}

#[test]
fn an_injected_loss_allows_any_row_below_and_a_perturbation_is_not_checked() {
    let two_below = [(3, [0, 0]), (9, [19, 4])];
    for fault in ["lose", "reset-to-initial"] {
        let v = judge(&two_below, vec![], vec![injection(fault)]).unwrap();
        let counts = (v.below, v.missing, v.reported_lost);
        assert_eq!(counts, (2, 13 + 5 + 1, None), "{fault}");
    }
    let v = judge(&two_below, vec![], vec![injection("perturb")]).unwrap();
    let why = v.unchecked.as_deref();
    assert_eq!(why, Some("a perturbation was injected at iteration 3"));
    says(&v.describe(), "not checked");
}

#[test]
fn updates_to_a_row_no_task_updated_fail() {
    let app = app();
    let (expected, mut params) = end(&app, &[]);
    let key = ParamKey::new(app.counters().id(), 99);
    params.rows.insert(key, RowData::I64(vec![1, 0]));
    let lost = stats(vec![], vec![injection("lose")]);
    let e = verdict(&app, &expected, &params, &lost).unwrap_err();
    says(&e, "row 99: expected no updates");
}
