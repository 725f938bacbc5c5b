//! The end of a `harp run`: one line that sums up the job's parameter traffic (the nodes'
//! reads and flushes, the servers' applied, refused, forwarded and skipped updates) and one
//! metrics record with every counter (`{"event":"job_stats",...}`; [`report`]).

use crate::metrics::MetricsWriter;
use anyhow::Result;
use harp::JobStats;

/// Whether the metrics file gets the `job_stats` record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountersRecord {
    Write,
    /// Not: the app's own record for the run holds `JobStats` whole (the counter's).
    InTheAppsRecord,
}

/// Prints the traffic line of `stats` and records its counters (see [`CountersRecord`]).
pub fn report(
    stats: &JobStats,
    metrics: Option<&MetricsWriter>,
    counters: CountersRecord,
) -> Result<()> {
    super::eprint_line(&traffic_line(stats));
    if let (Some(w), CountersRecord::Write) = (metrics, counters) {
        w.write(&serde_json::json!({
            "event": "job_stats",
            "node": stats.node,
            "servers": stats.servers,
            "cached_rows": stats.cached_rows,
            "nodes_counted": stats.nodes_counted,
            "nodes_counted_from_reports": stats.nodes_counted_from_reports,
        }))?;
    }
    Ok(())
}

/// `params: ...`: what the nodes read and flushed, and what the servers did with it (the
/// servers' rarer counters only when not zero).
pub(super) fn traffic_line(stats: &JobStats) -> String {
    let (n, s) = (&stats.node, &stats.servers);
    let reads = n.cache_hits + n.cache_misses;
    let from_cache = match reads {
        0 => String::new(),
        _ => format!(
            " ({:.1}% from cache)",
            100.0 * n.cache_hits as f64 / reads as f64
        ),
    };
    let mut line = format!(
        "params: {reads} rows read{from_cache}, {} updates flushed as {} rows in {} flushes; servers applied {}, refused {}",
        n.updates_recorded, n.rows_flushed, n.flushes, s.updates_applied, s.updates_refused
    );
    let rare = [
        (
            s.reads_forwarded + s.updates_forwarded,
            "forwarded during moves",
        ),
        (s.resent_updates_skipped, "sent again and skipped"),
        (n.requests_resent, "requests resent after a failure"),
        (s.staged_parts_dropped, "staged parts of dead nodes dropped"),
    ];
    for (count, what) in rare.into_iter().filter(|(count, _)| *count > 0) {
        line.push_str(&format!(", {count} {what}"));
    }
    match (stats.nodes_counted, stats.nodes_counted_from_reports) {
        (0 | 1, 0) => {}
        (nodes, 0) => line.push_str(&format!(" (summed over {nodes} nodes)")),
        (nodes, reported) => line.push_str(&format!(
            " (summed over {nodes} nodes, {reported} of them as last reported before they died or stopped answering)"
        )),
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp::{NodeStats, ServerStats};

    fn stats(node: NodeStats, servers: ServerStats, nodes_counted: u32) -> JobStats {
        JobStats {
            tasks_completed: 0,
            final_version: 0,
            elapsed_s: 0.0,
            cached_rows: 0,
            node,
            servers,
            nodes_counted,
            nodes_counted_from_reports: 0,
            checkpoints: Default::default(),
            recoveries: Vec::new(),
            worker_recoveries: Vec::new(),
            injections: Vec::new(),
            shards: 1,
        }
    }

    #[test]
    fn the_line_says_the_reads_flushes_and_what_the_servers_did() {
        let node = NodeStats {
            cache_hits: 3,
            cache_misses: 1,
            updates_recorded: 10,
            rows_flushed: 4,
            flushes: 2,
            ..NodeStats::default()
        };
        let servers = ServerStats {
            updates_applied: 4,
            ..ServerStats::default()
        };
        assert_eq!(
            traffic_line(&stats(node, servers, 1)),
            "params: 4 rows read (75.0% from cache), 10 updates flushed as 4 rows in 2 flushes; servers applied 4, refused 0"
        );
    }

    #[test]
    fn rare_counters_appear_only_when_not_zero_and_a_sum_names_its_nodes() {
        let servers = ServerStats {
            updates_forwarded: 2,
            reads_forwarded: 1,
            resent_updates_skipped: 5,
            ..ServerStats::default()
        };
        assert_eq!(
            traffic_line(&stats(NodeStats::default(), servers, 3)),
            "params: 0 rows read, 0 updates flushed as 0 rows in 0 flushes; servers applied 0, refused 0, 3 forwarded during moves, 5 sent again and skipped (summed over 3 nodes)"
        );
    }

    #[test]
    fn nodes_counted_from_their_last_report_are_named() {
        let stats = JobStats {
            nodes_counted_from_reports: 1,
            ..stats(NodeStats::default(), ServerStats::default(), 3)
        };
        assert!(
            traffic_line(&stats).ends_with(
                " (summed over 3 nodes, 1 of them as last reported before they died or stopped answering)"
            ),
            "{}",
            traffic_line(&stats)
        );
    }
}
