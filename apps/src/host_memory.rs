//! What this machine has to give: the memory the kernel says is available now, read from
//! `/proc/meminfo` (`MemAvailable`). An app checks what its input will make it hold
//! against it before allocating, so an absurd input (a six-line corpus that claims four
//! billion tokens) ends with a message that says so instead of the OOM killer.

use std::path::Path;

const GIB: f64 = (1u64 << 30) as f64;

/// The bytes of memory available now, `None` where the kernel does not say (not Linux).
pub fn available_bytes() -> Option<u64> {
    available_in(Path::new("/proc/meminfo"))
}

fn available_in(meminfo: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(meminfo).ok()?;
    parse_available(&text)
}

/// `MemAvailable:  123456 kB` → bytes.
fn parse_available(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// Refuses `needed` bytes that `available` cannot hold: `what` (e.g. "executor 3's
/// documents hold 4000000005 tokens") and `per_item`, how the need was counted, go into
/// the message. Nothing is refused when `available` is unknown.
pub fn check_fits(
    needed: u64,
    available: Option<u64>,
    what: impl FnOnce() -> String,
    per_item: &str,
) -> Result<(), String> {
    match available {
        Some(available) if needed > available => Err(format!(
            "{}; that needs {:.1} GiB ({per_item}), more than the {:.1} GiB this machine has available",
            what(),
            needed as f64 / GIB,
            available as f64 / GIB
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_available_in_bytes() {
        let meminfo =
            "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   2097152 kB\n";
        assert_eq!(parse_available(meminfo), Some(2 << 30));
        assert_eq!(parse_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_available("MemAvailable: lots\n"), None);
    }

    #[test]
    fn this_machine_says_what_it_has() {
        // Linux, where the tests run: a positive figure.
        assert!(available_bytes().is_some_and(|bytes| bytes > 0));
    }

    #[test]
    fn a_need_beyond_what_is_available_is_refused_with_both_figures() {
        let refused = check_fits(
            48 << 30,
            Some(3 << 29),
            || "executor 0's documents hold 4000000005 tokens".into(),
            "12 bytes a token",
        );
        assert_eq!(
            refused.unwrap_err(),
            "executor 0's documents hold 4000000005 tokens; that needs 48.0 GiB (12 bytes a token), more than the 1.5 GiB this machine has available"
        );
        assert!(check_fits(1 << 30, Some(1 << 30), String::new, "").is_ok());
        assert!(check_fits(u64::MAX, None, String::new, "").is_ok());
    }
}
