//! Fault injection for the tests of jobs across processes: environment variables that make a
//! node process slow at one chosen step, so that a test can kill it at that step. Each holds
//! milliseconds; unset, empty or not a number means no delay. A node process inherits them
//! from its master (`harp run --processes`) or from whoever started it.

use std::time::Duration;

/// A node process waits this long before it joins the job (a slow start, such as a large
/// dataset to load), so a test can kill it before the job starts.
pub const JOIN_DELAY_VAR: &str = "HARP_FAULT_JOIN_DELAY_MS";

/// A worker node holds each staged flush this long before reporting it to the master, so a
/// node killed meanwhile dies with staged parts the master never commits (which must then be
/// dropped and their tasks run again).
pub const STAGED_REPORT_DELAY_VAR: &str = "HARP_FAULT_STAGED_REPORT_DELAY_MS";

/// A node with a server answers the master's hand-off of a shard this long after the new
/// owner confirmed it holds the rows, so a node killed meanwhile dies with the move
/// unconfirmed while its new owner holds the rows already (the master must re-create the
/// shard there).
pub const HAND_OFF_ANSWER_DELAY_VAR: &str = "HARP_FAULT_HAND_OFF_ANSWER_DELAY_MS";

/// A node answers the master's drain of a leaving server this long late, so a test can
/// strike the job while a node that gave all its load away has not departed yet.
pub const DRAIN_ANSWER_DELAY_VAR: &str = "HARP_FAULT_DRAIN_ANSWER_DELAY_MS";

/// A node with a server sends its answer to each flush part (not staged) it applied for
/// one node, the first that sent it one, this long late, and answers the others at once (so
/// their completions, and the job's checkpoint rounds, go on): a node killed meanwhile dies
/// with parts applied, and saved by a round, that their sender never heard of (they must
/// not count twice).
pub const APPLY_ANSWER_DELAY_VAR: &str = "HARP_FAULT_APPLY_ANSWER_DELAY_MS";

/// A worker node holds the fetch of an executor state it released for a move (and parked
/// for the adopting node, one of 1 MiB or more) this long before it serves it, so a test can
/// kill it while the adopting node fetches, however small the state. States parked for a
/// consistent checkpoint are served at once.
pub const RELEASED_STATE_SERVE_DELAY_VAR: &str = "HARP_FAULT_RELEASED_STATE_SERVE_DELAY_MS";

/// [`APPLY_ANSWER_DELAY_VAR`]'s delay for a part that node `node` sent (read once: it is
/// asked for every flush part).
pub(crate) fn apply_answer_delay(node: u32) -> Option<Duration> {
    static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    static DELAYED_NODE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let delay = (*DELAY.get_or_init(|| fault_delay(APPLY_ANSWER_DELAY_VAR)))?;
    (*DELAYED_NODE.get_or_init(|| node) == node).then_some(delay)
}

/// The delay `var` (one of the variables above) asks for, if any.
pub(crate) fn fault_delay(var: &str) -> Option<Duration> {
    let value = std::env::var(var).ok()?;
    parse_delay(&value)
}

/// `value` read as milliseconds.
fn parse_delay(value: &str) -> Option<Duration> {
    value.trim().parse().ok().map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::parse_delay;
    use std::time::Duration;

    #[test]
    fn a_delay_is_a_whole_number_of_milliseconds_and_anything_else_is_none() {
        assert_eq!(parse_delay("250"), Some(Duration::from_millis(250)));
        assert_eq!(parse_delay(" 60000\n"), Some(Duration::from_secs(60)));
        assert_eq!(parse_delay(""), None);
        assert_eq!(parse_delay("1.5"), None);
        assert_eq!(parse_delay("-3"), None);
        assert_eq!(parse_delay("soon"), None);
    }
}
