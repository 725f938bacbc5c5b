//! What the machine did around a measured event, from Linux's `/proc`: the kernel's memory
//! stalls (`/proc/vmstat`: direct compaction and reclaim, transparent huge page faults,
//! major faults) and, summed over the processes of the job (`job_*`), page faults and
//! context switches (`/proc/PID/stat`, `/proc/PID/status`). `harp-bench elastic` takes a snapshot just
//! before each scale event and just after it and reports the differences on the event's
//! line, so a slow event can be told apart from one that waited on the kernel (a
//! compaction stall after a benchmark that filled memory) or on a busy CPU (involuntary
//! switches of the job's processes). Where `/proc` is missing (not Linux) the counters are
//! empty and nothing is reported.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The `/proc/vmstat` counters kept, as reported: a name, then the vmstat fields summed
/// into it (the kernel splits reclaim stalls by memory zone).
const VMSTAT: &[(&str, &[&str])] = &[
    ("compact_stall", &["compact_stall"]),
    (
        "allocstall",
        &[
            "allocstall_dma",
            "allocstall_dma32",
            "allocstall_normal",
            "allocstall_movable",
            "allocstall_device",
        ],
    ),
    ("thp_fault_alloc", &["thp_fault_alloc"]),
    ("thp_fault_fallback", &["thp_fault_fallback"]),
    ("pgmajfault", &["pgmajfault"]),
];

/// Counters at one moment; [`Snapshot::since`] gives what happened between two.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Snapshot {
    counters: BTreeMap<&'static str, u64>,
}

impl Snapshot {
    /// The machine's counters and the sums over `pids` of their faults and switches (a
    /// process that is gone counts nothing).
    pub(crate) fn take(pids: &[u32]) -> Self {
        let mut counters = BTreeMap::new();
        if let Ok(text) = std::fs::read_to_string("/proc/vmstat") {
            counters.extend(vmstat(&text));
        }
        for &pid in pids {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            for (name, value) in fault_counters(&stat) {
                *counters.entry(name).or_insert(0) += value;
            }
            // A process's status counts its main thread's switches only: sum its threads'
            // (those alive now: an exited thread's switches are not counted anywhere).
            let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for thread in threads.flatten() {
                let status =
                    std::fs::read_to_string(thread.path().join("status")).unwrap_or_default();
                for (name, value) in switch_counters(&status) {
                    *counters.entry(name).or_insert(0) += value;
                }
            }
        }
        Self { counters }
    }

    /// What each counter rose by from `earlier` to this one (a counter missing from
    /// either is left out).
    pub(crate) fn since(&self, earlier: &Snapshot) -> Snapshot {
        let counters = self
            .counters
            .iter()
            .filter_map(|(name, now)| {
                let then = earlier.counters.get(name)?;
                Some((*name, now.saturating_sub(*then)))
            })
            .collect();
        Snapshot { counters }
    }

    /// The counters as a JSON object (empty where `/proc` is missing).
    pub(crate) fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .counters
            .iter()
            .map(|(name, value)| (name.to_string(), Value::from(*value)))
            .collect();
        Value::Object(map)
    }

    /// Adds `other`'s counters to these (for totals over many events).
    pub(crate) fn add(&mut self, other: &Snapshot) {
        for (name, value) in &other.counters {
            *self.counters.entry(name).or_insert(0) += value;
        }
    }
}

/// The kept counters of a `/proc/vmstat` text ("name value" lines); a counter none of
/// whose fields is present (an older kernel) is left out.
fn vmstat(text: &str) -> Vec<(&'static str, u64)> {
    let fields: BTreeMap<&str, u64> = text
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once(' ')?;
            Some((name, value.trim().parse().ok()?))
        })
        .collect();
    VMSTAT
        .iter()
        .filter_map(|(name, parts)| {
            let present: Vec<u64> = parts
                .iter()
                .filter_map(|p| fields.get(p).copied())
                .collect();
            (!present.is_empty()).then(|| (*name, present.iter().sum()))
        })
        .collect()
}

/// A process's minor and major faults, all its threads' (`/proc/PID/stat` fields 10 and
/// 12); what cannot be read is left out.
fn fault_counters(stat: &str) -> Vec<(&'static str, u64)> {
    // The command name (field 2) is in parentheses and may hold spaces: count from the
    // last ')'. After it come field 3 (state) onwards, so field N is fields[N - 3].
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Vec::new();
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    [("job_minflt", 10), ("job_majflt", 12)]
        .into_iter()
        .filter_map(|(name, field)| Some((name, fields.get(field - 3)?.parse().ok()?)))
        .collect()
}

/// A thread's voluntary and involuntary context switches (`/proc/PID/task/TID/status`);
/// what cannot be read is left out.
fn switch_counters(status: &str) -> Vec<(&'static str, u64)> {
    [
        ("job_voluntary_switches", "voluntary_ctxt_switches:"),
        ("job_involuntary_switches", "nonvoluntary_ctxt_switches:"),
    ]
    .into_iter()
    .filter_map(|(name, key)| {
        let value = status.lines().find_map(|line| line.strip_prefix(key))?;
        Some((name, value.trim().parse().ok()?))
    })
    .collect()
}

/// The kernel's transparent huge page settings (`enabled`, `defrag`), the chosen value
/// of each (the one in brackets), where they can be read.
pub(crate) fn thp_settings() -> Value {
    let mut map = Map::new();
    for name in ["enabled", "defrag"] {
        let path = format!("/sys/kernel/mm/transparent_hugepage/{name}");
        if let Ok(text) = std::fs::read_to_string(path) {
            let chosen = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
                .unwrap_or(text.trim());
            map.insert(name.to_string(), Value::from(chosen));
        }
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmstat_keeps_the_stall_counters_and_sums_reclaim_over_zones() {
        let text = "nr_free_pages 100\ncompact_stall 7\nallocstall_dma 0\n\
                    allocstall_normal 3\nallocstall_movable 2\nthp_fault_alloc 11\n\
                    pgmajfault 4\n";
        let kept: BTreeMap<_, _> = vmstat(text).into_iter().collect();
        assert_eq!(kept.get("compact_stall"), Some(&7));
        assert_eq!(kept.get("allocstall"), Some(&5));
        assert_eq!(kept.get("thp_fault_alloc"), Some(&11));
        assert_eq!(kept.get("pgmajfault"), Some(&4));
        // Not in this kernel's vmstat: left out, not reported as 0.
        assert_eq!(kept.get("thp_fault_fallback"), None);
        assert_eq!(kept.get("nr_free_pages"), None);
    }

    #[test]
    fn a_process_counts_faults_after_its_parenthesised_name_and_a_thread_its_switches() {
        // Field 2 holds a space and a ')': fields are counted from the last ')'.
        let stat = "4242 (harp node) x) S 1 4242 4242 0 -1 4194560 1500 0 3 0 12 5";
        let faults: BTreeMap<_, _> = fault_counters(stat).into_iter().collect();
        assert_eq!(faults.get("job_minflt"), Some(&1500));
        assert_eq!(faults.get("job_majflt"), Some(&3));
        assert!(fault_counters("").is_empty());
        let status = "Name:\tharp\nvoluntary_ctxt_switches:\t90\nnonvoluntary_ctxt_switches:\t6\n";
        let switches: BTreeMap<_, _> = switch_counters(status).into_iter().collect();
        assert_eq!(switches.get("job_voluntary_switches"), Some(&90));
        assert_eq!(switches.get("job_involuntary_switches"), Some(&6));
        assert!(switch_counters("").is_empty());
    }

    #[test]
    fn since_gives_the_rise_of_counters_both_snapshots_have() {
        let at = |pairs: &[(&'static str, u64)]| Snapshot {
            counters: pairs.iter().copied().collect(),
        };
        let earlier = at(&[("compact_stall", 5), ("job_minflt", 100)]);
        let later = at(&[("compact_stall", 9), ("job_minflt", 100), ("pgmajfault", 1)]);
        assert_eq!(
            later.since(&earlier),
            at(&[("compact_stall", 4), ("job_minflt", 0)])
        );
        let mut total = at(&[("compact_stall", 1)]);
        total.add(&later.since(&earlier));
        assert_eq!(total, at(&[("compact_stall", 5), ("job_minflt", 0)]));
    }

    #[test]
    fn this_process_can_be_read_on_linux() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            eprintln!("skipping: no /proc here");
            return;
        }
        // Another thread that blocks: its switches count in this process's sum while it
        // lives (a thread that exited takes its counts with it).
        let before = Snapshot::take(&[std::process::id()]);
        let (slept, done) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let sleeper = std::thread::spawn(move || {
            for _ in 0..20 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let _ = slept.0.send(());
            let _ = done.1.recv();
        });
        slept.1.recv().expect("the sleeper slept");
        let after = Snapshot::take(&[std::process::id()]).since(&before);
        drop(done.0);
        sleeper.join().expect("the sleeper ends");
        let json = after.to_json();
        assert!(json.get("job_minflt").is_some(), "{json}");
        let switches = json["job_voluntary_switches"].as_u64().unwrap_or(0);
        assert!(
            switches >= 20,
            "20 sleeps of a thread, {switches} switches: {json}"
        );
    }
}
