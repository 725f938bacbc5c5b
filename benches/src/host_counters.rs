//! What the machine did around a measured event, from Linux's `/proc`: the kernel's memory
//! stalls (`/proc/vmstat`: direct compaction and reclaim, transparent huge page faults,
//! major faults), the CPU time a hypervisor took (`/proc/stat`'s steal) and, for each named group of the job's processes (`master_*`,
//! `nodes_*`), their page faults (`/proc/PID/stat`) and, summed over their threads, context
//! switches (`status`), time on a CPU and time spent runnable but waiting for one
//! (`schedstat`, in microseconds). `harp-bench elastic` takes a snapshot just before each
//! scale event and just after it and reports the differences on the event's line, so a
//! slow event can be told apart from one that waited on the kernel (a compaction stall
//! after a benchmark that filled memory), on a busy CPU (run-queue waits, involuntary
//! switches) or on a saturated process (CPU time near its threads × the event's length).
//! Threads are those alive at each snapshot: one that exited in between takes its counts
//! with it. Where `/proc` is missing (not Linux) the counters are empty and nothing is
//! reported.

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
    counters: BTreeMap<String, u64>,
}

impl Snapshot {
    /// The machine's counters and, for each `(group, pids)`, the sums over those
    /// processes' threads, named `{group}_{counter}` (a process that is gone counts
    /// nothing).
    pub(crate) fn take(groups: &[(&str, &[u32])]) -> Self {
        let mut counters = BTreeMap::new();
        if let Ok(text) = std::fs::read_to_string("/proc/vmstat") {
            counters.extend(vmstat(&text).into_iter().map(|(n, v)| (n.to_string(), v)));
        }
        if let Some(steal) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| steal_ms(&text))
        {
            counters.insert("steal_ms".to_string(), steal);
        }
        for (group, pids) in groups {
            let mut add = |name: &str, value: u64| {
                *counters.entry(format!("{group}_{name}")).or_insert(0) += value;
            };
            for &pid in *pids {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                for (name, value) in fault_counters(&stat) {
                    add(name, value);
                }
                // A process's status and schedstat count its main thread only: sum its
                // threads'.
                let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                    continue;
                };
                for thread in threads.flatten() {
                    let read = |file| {
                        std::fs::read_to_string(thread.path().join(file)).unwrap_or_default()
                    };
                    let counted = switch_counters(&read("status"))
                        .into_iter()
                        .chain(schedstat_counters(&read("schedstat")));
                    for (name, value) in counted {
                        add(name, value);
                    }
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
                Some((name.clone(), now.saturating_sub(*then)))
            })
            .collect();
        Snapshot { counters }
    }

    /// The counters as a JSON object (empty where `/proc` is missing).
    pub(crate) fn to_json(&self) -> Value {
        let map: Map<String, Value> = self
            .counters
            .iter()
            .map(|(name, value)| (name.clone(), Value::from(*value)))
            .collect();
        Value::Object(map)
    }

    /// Adds `other`'s counters to these (for totals over many events).
    pub(crate) fn add(&mut self, other: &Snapshot) {
        for (name, value) in &other.counters {
            *self.counters.entry(name.clone()).or_insert(0) += value;
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

/// The time the hypervisor ran something else while this machine's CPUs wanted to run
/// (all CPUs, milliseconds), from `/proc/stat`'s first line (`cpu user nice system idle
/// iowait irq softirq steal ...`, in USER_HZ ticks: 100 per second on Linux).
fn steal_ms(stat: &str) -> Option<u64> {
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: u64 = fields.nth(7)?.parse().ok()?;
    Some(ticks * 10)
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
    [("minflt", 10), ("majflt", 12)]
        .into_iter()
        .filter_map(|(name, field)| Some((name, fields.get(field - 3)?.parse().ok()?)))
        .collect()
}

/// A thread's voluntary and involuntary context switches (`/proc/PID/task/TID/status`);
/// what cannot be read is left out.
fn switch_counters(status: &str) -> Vec<(&'static str, u64)> {
    [
        ("voluntary_switches", "voluntary_ctxt_switches:"),
        ("involuntary_switches", "nonvoluntary_ctxt_switches:"),
    ]
    .into_iter()
    .filter_map(|(name, key)| {
        let value = status.lines().find_map(|line| line.strip_prefix(key))?;
        Some((name, value.trim().parse().ok()?))
    })
    .collect()
}

/// A thread's time on a CPU and time runnable but waiting for one, in microseconds
/// (`/proc/PID/task/TID/schedstat`: nanoseconds, then the run count); what cannot be read
/// is left out.
fn schedstat_counters(schedstat: &str) -> Vec<(&'static str, u64)> {
    let mut fields = schedstat.split_whitespace();
    ["cpu_us", "runqueue_wait_us"]
        .into_iter()
        .filter_map(|name| {
            let ns: u64 = fields.next()?.parse().ok()?;
            Some((name, ns / 1_000))
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
        assert_eq!(faults.get("minflt"), Some(&1500));
        assert_eq!(faults.get("majflt"), Some(&3));
        assert!(fault_counters("").is_empty());
        let status = "Name:\tharp\nvoluntary_ctxt_switches:\t90\nnonvoluntary_ctxt_switches:\t6\n";
        let switches: BTreeMap<_, _> = switch_counters(status).into_iter().collect();
        assert_eq!(switches.get("voluntary_switches"), Some(&90));
        assert_eq!(switches.get("involuntary_switches"), Some(&6));
        assert!(switch_counters("").is_empty());
        let sched: BTreeMap<_, _> = schedstat_counters("2500000 730999 41\n")
            .into_iter()
            .collect();
        assert_eq!(sched.get("cpu_us"), Some(&2500));
        assert_eq!(sched.get("runqueue_wait_us"), Some(&730));
        assert!(schedstat_counters("").is_empty());
    }

    #[test]
    fn steal_is_the_eighth_number_of_the_cpu_line_in_ticks_of_10_ms() {
        let stat =
            "cpu  2179113 0 261940 2423663 6440 0 14589 1603 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(steal_ms(stat), Some(16_030));
        // An older kernel's line without steal, or no cpu line: nothing.
        assert_eq!(steal_ms("cpu  1 2 3 4 5 6 7\n"), None);
        assert_eq!(steal_ms("intr 5\n"), None);
    }

    #[test]
    fn since_gives_the_rise_of_counters_both_snapshots_have() {
        let at = |pairs: &[(&'static str, u64)]| Snapshot {
            counters: pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
        };
        let earlier = at(&[("compact_stall", 5), ("master_minflt", 100)]);
        let later = at(&[
            ("compact_stall", 9),
            ("master_minflt", 100),
            ("pgmajfault", 1),
        ]);
        assert_eq!(
            later.since(&earlier),
            at(&[("compact_stall", 4), ("master_minflt", 0)])
        );
        let mut total = at(&[("compact_stall", 1)]);
        total.add(&later.since(&earlier));
        assert_eq!(total, at(&[("compact_stall", 5), ("master_minflt", 0)]));
    }

    #[test]
    fn this_process_can_be_read_on_linux() {
        if !std::path::Path::new("/proc/self/stat").exists() {
            eprintln!("skipping: no /proc here");
            return;
        }
        // Another thread that blocks: its switches count in this process's sum while it
        // lives (a thread that exited takes its counts with it).
        let me: &[u32] = &[std::process::id()];
        let before = Snapshot::take(&[("master", me)]);
        let (slept, done) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let sleeper = std::thread::spawn(move || {
            for _ in 0..20 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let _ = slept.0.send(());
            let _ = done.1.recv();
        });
        slept.1.recv().expect("the sleeper slept");
        let after = Snapshot::take(&[("master", me)]).since(&before);
        drop(done.0);
        sleeper.join().expect("the sleeper ends");
        let json = after.to_json();
        assert!(json.get("master_minflt").is_some(), "{json}");
        assert!(json.get("master_cpu_us").is_some(), "{json}");
        let switches = json["master_voluntary_switches"].as_u64().unwrap_or(0);
        assert!(
            switches >= 20,
            "20 sleeps of a thread, {switches} switches: {json}"
        );
    }
}
