//! The parameter-cache validity rule (Litz §4.4, DESIGN §2.1).
//!
//! A value fetched by a task of version `v` reflects every update of every task whose
//! completion the driver saw before that task was dispatched. A task of version `t <= v`
//! depends on a subset of those completions, so it may use the value; a task of version
//! `t > v` may depend on a completion the value does not reflect, so it must fetch.

use crate::version::Version;

/// May a task of `task_version` use a value cached with `cached_version`?
pub fn cached_value_usable(task_version: Version, cached_version: Version) -> bool {
    task_version <= cached_version
}

/// Should a freshly fetched value tagged `incoming` replace a cached one tagged `existing`?
///
/// Fetches can return out of order; a value tagged with an older version must never replace
/// one that is valid for more tasks.
pub fn should_replace_cached(existing: Version, incoming: Version) -> bool {
    incoming >= existing
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_or_older_task_uses_cache() {
        assert!(cached_value_usable(Version(3), Version(3)));
        assert!(cached_value_usable(Version(2), Version(3)));
        assert!(!cached_value_usable(Version(4), Version(3)));
    }

    #[test]
    fn older_fetch_never_replaces_newer() {
        assert!(!should_replace_cached(Version(5), Version(4)));
        assert!(should_replace_cached(Version(5), Version(5)));
        assert!(should_replace_cached(Version(5), Version(6)));
    }
}
