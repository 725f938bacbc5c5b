//! The membership view: who is in the job, and who died (DESIGN §2.4).
//!
//! [`MembershipView`] is the master's table of nodes. Each member holds a lease that it
//! renews by heartbeat; a lease that is not renewed within `lease_timeout_ms` expires and
//! the node is declared dead. The view is a deterministic state machine in the style of
//! quinn-proto: inputs are `handle_*` calls and [`tick`](MembershipView::tick), outputs are
//! drained with [`poll_event`](MembershipView::poll_event), and the time of every input is
//! passed in as `now_ms` (milliseconds on any clock the caller picks, as long as it does not
//! go backwards; a smaller value than one seen before is treated as the largest seen).
//!
//! Lease rule: a member whose last renewal (join or heartbeat) was at `r` holds its lease
//! over `[r, r + lease_timeout_ms)`. The first input at a time `>= r + lease_timeout_ms`
//! (any input, not only `tick`) declares it dead: it is removed and one
//! [`MembershipEvent::Died`] is queued. Expiry is processed before the input itself, so a
//! heartbeat that arrives after the deadline is refused with
//! [`MembershipError::UnknownNode`] instead of reviving the node.
//!
//! Invariants kept:
//! - every member has exactly one entry in the deadline index, at `last_renewal + timeout`;
//! - each membership (join … leave/death) produces exactly one `Joined` and at most one of
//!   `Left` / `Died`, never both, never twice; a node may join again after either;
//! - a node is never declared dead before its deadline, and is declared dead by the first
//!   input at or after it;
//! - events come out in input order; deaths found by one input are ordered by deadline,
//!   then by node id, so the same inputs always give the same events.
//!
//! The shell drives the view: it feeds joins, heartbeats and leaves as they arrive, calls
//! `tick` at [`next_deadline_ms`](MembershipView::next_deadline_ms), and forwards events.
//! What a node held (executors, shards) is the caller's to track; the events carry the
//! node's [`MemberInfo`] so the caller can still describe a member after it is gone.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// One node of a job: one OS process offering worker and/or server capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node-{}", self.0)
    }
}

/// The capacity a node offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeRoles {
    pub worker: bool,
    pub server: bool,
}

impl NodeRoles {
    pub const WORKER: Self = Self {
        worker: true,
        server: false,
    };
    pub const SERVER: Self = Self {
        worker: false,
        server: true,
    };
    pub const BOTH: Self = Self {
        worker: true,
        server: true,
    };
    pub const NONE: Self = Self {
        worker: false,
        server: false,
    };
}

impl fmt::Display for NodeRoles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match (self.worker, self.server) {
            (true, true) => "worker+server",
            (true, false) => "worker",
            (false, true) => "server",
            (false, false) => "none",
        };
        f.write_str(text)
    }
}

/// What a node tells the master about itself when it joins.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Where other nodes reach it (e.g. `127.0.0.1:7000`); empty for an in-process node.
    pub address: String,
    pub roles: NodeRoles,
}

impl MemberInfo {
    pub fn new(address: impl Into<String>, roles: NodeRoles) -> Self {
        Self {
            address: address.into(),
            roles,
        }
    }
}

/// Lease timing and table size. Build with [`Default`] or
/// [`with_lease_timeout_ms`](Self::with_lease_timeout_ms) and check with
/// [`validate`](Self::validate) (done by [`MembershipView::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipConfig {
    /// A lease not renewed for this long expires and its node is declared dead.
    pub lease_timeout_ms: u64,
    /// How often a node renews its lease; below `lease_timeout_ms`, so one lost heartbeat
    /// does not kill a node.
    pub heartbeat_interval_ms: u64,
    /// Joins beyond this many live members are refused ([`MembershipError::JobFull`]).
    pub members_max: u32,
}

impl MembershipConfig {
    pub const LEASE_TIMEOUT_MS_DEFAULT: u64 = 3000;
    pub const MEMBERS_MAX_DEFAULT: u32 = 4096;

    /// A config with this lease timeout and a heartbeat every third of it (at least 1 ms).
    pub fn with_lease_timeout_ms(lease_timeout_ms: u64) -> Self {
        Self {
            lease_timeout_ms,
            heartbeat_interval_ms: (lease_timeout_ms / 3).max(1),
            members_max: Self::MEMBERS_MAX_DEFAULT,
        }
    }

    /// Checks `0 < heartbeat_interval_ms < lease_timeout_ms` and `members_max > 0`.
    pub fn validate(&self) -> Result<(), MembershipError> {
        if self.lease_timeout_ms == 0 {
            return Err(MembershipError::ZeroLeaseTimeout);
        }
        if self.heartbeat_interval_ms == 0 {
            return Err(MembershipError::ZeroHeartbeatInterval);
        }
        if self.heartbeat_interval_ms >= self.lease_timeout_ms {
            return Err(MembershipError::HeartbeatNotBelowLease {
                heartbeat_interval_ms: self.heartbeat_interval_ms,
                lease_timeout_ms: self.lease_timeout_ms,
            });
        }
        if self.members_max == 0 {
            return Err(MembershipError::ZeroMembersMax);
        }
        Ok(())
    }
}

impl Default for MembershipConfig {
    fn default() -> Self {
        Self::with_lease_timeout_ms(Self::LEASE_TIMEOUT_MS_DEFAULT)
    }
}

/// An input the membership view refused; the view is unchanged by the refused part (leases
/// that expired at the input's time are still expired).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("lease timeout must be above 0 ms")]
    ZeroLeaseTimeout,
    #[error("heartbeat interval must be above 0 ms")]
    ZeroHeartbeatInterval,
    #[error("heartbeat interval {heartbeat_interval_ms} ms must be below the lease timeout {lease_timeout_ms} ms")]
    HeartbeatNotBelowLease {
        heartbeat_interval_ms: u64,
        lease_timeout_ms: u64,
    },
    #[error("members_max must be above 0")]
    ZeroMembersMax,
    #[error("{0} is already a member")]
    DuplicateNode(NodeId),
    #[error("job is full: {members_max} members")]
    JobFull { members_max: u32 },
    #[error("{0} is not a member (never joined, left, or declared dead)")]
    UnknownNode(NodeId),
}

/// What the master learns about membership, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MembershipEvent {
    /// The node joined and holds a lease.
    Joined { node: NodeId, info: MemberInfo },
    /// The node left on purpose (or was removed by the master).
    Left { node: NodeId, info: MemberInfo },
    /// The node's lease expired: it last renewed at `last_seen_ms`, and the expiry was
    /// noticed at `detected_at_ms` (`>= last_seen_ms + lease_timeout_ms`).
    Died {
        node: NodeId,
        info: MemberInfo,
        last_seen_ms: u64,
        detected_at_ms: u64,
    },
}

impl MembershipEvent {
    /// The node the event is about.
    pub fn node(&self) -> NodeId {
        match self {
            Self::Joined { node, .. } | Self::Left { node, .. } | Self::Died { node, .. } => *node,
        }
    }

    /// What the node said about itself when it joined.
    pub fn info(&self) -> &MemberInfo {
        match self {
            Self::Joined { info, .. } | Self::Left { info, .. } | Self::Died { info, .. } => info,
        }
    }
}

/// What a node is told when it joins or renews: when its lease ends unless renewed, and how
/// often to renew.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    pub expires_at_ms: u64,
    pub heartbeat_interval_ms: u64,
}

/// One live member as the view sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub info: MemberInfo,
    pub joined_at_ms: u64,
    pub last_renewal_ms: u64,
}

/// The master's member table with lease expiry. See the module docs for the rules.
#[derive(Clone, Debug)]
pub struct MembershipView {
    config: MembershipConfig,
    now_ms: u64,
    members: BTreeMap<NodeId, Member>,
    /// `(last_renewal_ms + lease_timeout_ms, node)` for every member, and nothing else.
    deadlines: BTreeSet<(u64, NodeId)>,
    events: VecDeque<MembershipEvent>,
}

impl MembershipView {
    /// An empty view; fails if the config is invalid.
    pub fn new(config: MembershipConfig) -> Result<Self, MembershipError> {
        config.validate()?;
        Ok(Self {
            config,
            now_ms: 0,
            members: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            events: VecDeque::new(),
        })
    }

    // ---- getters ----

    pub fn config(&self) -> &MembershipConfig {
        &self.config
    }

    /// The latest time the view has been given.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.members.contains_key(&node)
    }

    pub fn member(&self, node: NodeId) -> Option<&Member> {
        self.members.get(&node)
    }

    /// Live members in node id order (members whose lease lapsed but that no input has
    /// declared dead yet are still listed).
    pub fn members(&self) -> impl Iterator<Item = (NodeId, &Member)> + '_ {
        self.members.iter().map(|(node, member)| (*node, member))
    }

    /// When the member's lease ends unless renewed.
    pub fn lease_deadline_ms(&self, node: NodeId) -> Option<u64> {
        self.members.get(&node).map(|m| self.deadline_of(m))
    }

    /// The earliest lease deadline: the shell should call [`tick`](Self::tick) then (or
    /// earlier). `None` when there are no members.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    // ---- inputs ----

    /// A node asks to join. Refused if it is already a member or the job is full.
    pub fn handle_join(
        &mut self,
        node: NodeId,
        info: MemberInfo,
        now_ms: u64,
    ) -> Result<LeaseGrant, MembershipError> {
        self.advance(now_ms);
        if self.members.contains_key(&node) {
            return Err(MembershipError::DuplicateNode(node));
        }
        if self.members.len() >= self.config.members_max as usize {
            return Err(MembershipError::JobFull {
                members_max: self.config.members_max,
            });
        }
        let now = self.now_ms;
        let member = Member {
            info: info.clone(),
            joined_at_ms: now,
            last_renewal_ms: now,
        };
        let deadline = self.deadline_of(&member);
        self.deadlines.insert((deadline, node));
        self.members.insert(node, member);
        self.events
            .push_back(MembershipEvent::Joined { node, info });
        Ok(self.grant(deadline))
    }

    /// A member renews its lease. Refused for a node that is not a member, including one
    /// whose lease expired at or before `now_ms` (it must join again).
    pub fn handle_heartbeat(
        &mut self,
        node: NodeId,
        now_ms: u64,
    ) -> Result<LeaseGrant, MembershipError> {
        self.advance(now_ms);
        let timeout = self.config.lease_timeout_ms;
        let now = self.now_ms;
        let member = self
            .members
            .get_mut(&node)
            .ok_or(MembershipError::UnknownNode(node))?;
        let old_deadline = member.last_renewal_ms.saturating_add(timeout);
        member.last_renewal_ms = now;
        let new_deadline = now.saturating_add(timeout);
        let removed = self.deadlines.remove(&(old_deadline, node));
        debug_assert!(removed, "every member has a deadline entry");
        self.deadlines.insert((new_deadline, node));
        Ok(self.grant(new_deadline))
    }

    /// A member leaves on purpose (or the master removes it): [`MembershipEvent::Left`].
    pub fn handle_leave(&mut self, node: NodeId, now_ms: u64) -> Result<(), MembershipError> {
        self.advance(now_ms);
        let member = self
            .remove(node)
            .ok_or(MembershipError::UnknownNode(node))?;
        self.events.push_back(MembershipEvent::Left {
            node,
            info: member.info,
        });
        Ok(())
    }

    /// Time passes: every lease whose deadline is at or before `now_ms` expires.
    pub fn tick(&mut self, now_ms: u64) {
        self.advance(now_ms);
    }

    // ---- outputs ----

    /// The next event, oldest first.
    pub fn poll_event(&mut self) -> Option<MembershipEvent> {
        self.events.pop_front()
    }

    // ---- internals ----

    fn deadline_of(&self, member: &Member) -> u64 {
        member
            .last_renewal_ms
            .saturating_add(self.config.lease_timeout_ms)
    }

    fn grant(&self, expires_at_ms: u64) -> LeaseGrant {
        LeaseGrant {
            expires_at_ms,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
        }
    }

    fn remove(&mut self, node: NodeId) -> Option<Member> {
        let member = self.members.remove(&node)?;
        let removed = self.deadlines.remove(&(self.deadline_of(&member), node));
        debug_assert!(removed, "every member has a deadline entry");
        Some(member)
    }

    /// Moves the clock to `now_ms` (never backwards) and expires every lease due by then,
    /// in (deadline, node) order.
    fn advance(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        while let Some(&(deadline, node)) = self.deadlines.first() {
            if deadline > self.now_ms {
                break;
            }
            // The entry came from the index, and the index holds exactly the members.
            let Some(member) = self.remove(node) else {
                debug_assert!(false, "deadline entry without a member");
                self.deadlines.remove(&(deadline, node));
                continue;
            };
            self.events.push_back(MembershipEvent::Died {
                node,
                info: member.info,
                last_seen_ms: member.last_renewal_ms,
                detected_at_ms: self.now_ms,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg(timeout: u64) -> MembershipConfig {
        MembershipConfig::with_lease_timeout_ms(timeout)
    }

    fn info(n: u32) -> MemberInfo {
        MemberInfo::new(format!("127.0.0.1:{}", 7000 + n), NodeRoles::BOTH)
    }

    fn drain(view: &mut MembershipView) -> Vec<MembershipEvent> {
        std::iter::from_fn(|| view.poll_event()).collect()
    }

    #[test]
    fn config_defaults_and_validation() {
        let c = MembershipConfig::default();
        assert_eq!(c.lease_timeout_ms, 3000);
        assert_eq!(c.heartbeat_interval_ms, 1000);
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(cfg(0).validate(), Err(MembershipError::ZeroLeaseTimeout));
        assert_eq!(
            cfg(1).validate(),
            Err(MembershipError::HeartbeatNotBelowLease {
                heartbeat_interval_ms: 1,
                lease_timeout_ms: 1
            })
        );
        assert_eq!(cfg(2).validate(), Ok(()));
        let zero_hb = MembershipConfig {
            heartbeat_interval_ms: 0,
            ..c
        };
        assert_eq!(
            zero_hb.validate(),
            Err(MembershipError::ZeroHeartbeatInterval)
        );
        let zero_max = MembershipConfig {
            members_max: 0,
            ..c
        };
        assert_eq!(zero_max.validate(), Err(MembershipError::ZeroMembersMax));
        assert!(MembershipView::new(cfg(0)).is_err());
    }

    #[test]
    fn join_heartbeat_leave() {
        let mut v = MembershipView::new(cfg(100)).unwrap();
        assert_eq!(v.next_deadline_ms(), None);
        let grant = v.handle_join(NodeId(1), info(1), 10).unwrap();
        assert_eq!(
            grant,
            LeaseGrant {
                expires_at_ms: 110,
                heartbeat_interval_ms: 33
            }
        );
        assert_eq!(v.next_deadline_ms(), Some(110));
        assert_eq!(
            v.handle_heartbeat(NodeId(1), 50).unwrap().expires_at_ms,
            150
        );
        assert_eq!(v.next_deadline_ms(), Some(150));
        assert_eq!(v.member(NodeId(1)).unwrap().joined_at_ms, 10);
        v.handle_leave(NodeId(1), 60).unwrap();
        assert!(v.is_empty());
        assert_eq!(v.next_deadline_ms(), None);
        assert_eq!(
            drain(&mut v),
            vec![
                MembershipEvent::Joined {
                    node: NodeId(1),
                    info: info(1)
                },
                MembershipEvent::Left {
                    node: NodeId(1),
                    info: info(1)
                },
            ]
        );
        v.tick(10_000);
        assert!(drain(&mut v).is_empty(), "a node that left never dies");
    }

    #[test]
    fn typed_errors() {
        let mut v = MembershipView::new(MembershipConfig {
            members_max: 2,
            ..cfg(100)
        })
        .unwrap();
        v.handle_join(NodeId(1), info(1), 0).unwrap();
        assert_eq!(
            v.handle_join(NodeId(1), info(1), 1),
            Err(MembershipError::DuplicateNode(NodeId(1)))
        );
        v.handle_join(NodeId(2), info(2), 1).unwrap();
        assert_eq!(
            v.handle_join(NodeId(3), info(3), 2),
            Err(MembershipError::JobFull { members_max: 2 })
        );
        assert_eq!(
            v.handle_heartbeat(NodeId(9), 2),
            Err(MembershipError::UnknownNode(NodeId(9)))
        );
        assert_eq!(
            v.handle_leave(NodeId(9), 2),
            Err(MembershipError::UnknownNode(NodeId(9)))
        );
        assert_eq!(v.len(), 2);
        let msg = MembershipError::JobFull { members_max: 2 }.to_string();
        assert_eq!(msg, "job is full: 2 members");
    }

    #[test]
    fn expiry_exactly_at_deadline_once() {
        let mut v = MembershipView::new(cfg(100)).unwrap();
        v.handle_join(NodeId(1), info(1), 0).unwrap();
        drain(&mut v);
        v.tick(99);
        assert!(drain(&mut v).is_empty(), "not before the deadline");
        v.tick(100);
        assert_eq!(
            drain(&mut v),
            vec![MembershipEvent::Died {
                node: NodeId(1),
                info: info(1),
                last_seen_ms: 0,
                detected_at_ms: 100
            }]
        );
        v.tick(100);
        v.tick(1000);
        assert!(drain(&mut v).is_empty(), "declared dead once");
        assert_eq!(
            v.handle_heartbeat(NodeId(1), 1000),
            Err(MembershipError::UnknownNode(NodeId(1)))
        );
        // A dead node may join again.
        v.handle_join(NodeId(1), info(1), 1001).unwrap();
        assert!(matches!(
            drain(&mut v)[..],
            [MembershipEvent::Joined { .. }]
        ));
    }

    #[test]
    fn late_heartbeat_does_not_revive() {
        let mut v = MembershipView::new(cfg(100)).unwrap();
        v.handle_join(NodeId(1), info(1), 0).unwrap();
        assert_eq!(
            v.handle_heartbeat(NodeId(1), 99).unwrap().expires_at_ms,
            199
        );
        assert_eq!(
            v.handle_heartbeat(NodeId(1), 199),
            Err(MembershipError::UnknownNode(NodeId(1)))
        );
        let events = drain(&mut v);
        assert!(matches!(
            events[..],
            [
                MembershipEvent::Joined { .. },
                MembershipEvent::Died {
                    last_seen_ms: 99,
                    detected_at_ms: 199,
                    ..
                }
            ]
        ));
    }

    #[test]
    fn deaths_ordered_by_deadline_then_id() {
        let mut v = MembershipView::new(cfg(100)).unwrap();
        v.handle_join(NodeId(5), info(5), 0).unwrap();
        v.handle_join(NodeId(3), info(3), 0).unwrap();
        v.handle_join(NodeId(4), info(4), 10).unwrap();
        v.handle_join(NodeId(1), info(1), 10).unwrap();
        drain(&mut v);
        v.tick(500);
        let order: Vec<u32> = drain(&mut v).iter().map(|e| e.node().0).collect();
        assert_eq!(order, vec![3, 5, 1, 4]);
    }

    #[test]
    fn clock_never_goes_backwards() {
        let mut v = MembershipView::new(cfg(100)).unwrap();
        v.handle_join(NodeId(1), info(1), 500).unwrap();
        // An older timestamp counts as the latest one seen.
        let grant = v.handle_heartbeat(NodeId(1), 400).unwrap();
        assert_eq!(grant.expires_at_ms, 600);
        assert_eq!(v.now_ms(), 500);
    }

    #[test]
    fn huge_times_saturate() {
        let mut v = MembershipView::new(cfg(100)).unwrap();
        v.handle_join(NodeId(1), info(1), u64::MAX - 10).unwrap();
        assert_eq!(v.next_deadline_ms(), Some(u64::MAX));
        v.tick(u64::MAX);
        assert!(matches!(
            drain(&mut v)[..],
            [_, MembershipEvent::Died { .. }]
        ));
    }

    // ---- property tests ----

    #[derive(Clone, Copy, Debug)]
    enum Op {
        Join(u32),
        Heartbeat(u32),
        Leave(u32),
        Tick,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (0u32..6).prop_map(Op::Join),
            4 => (0u32..6).prop_map(Op::Heartbeat),
            1 => (0u32..6).prop_map(Op::Leave),
            2 => Just(Op::Tick),
        ]
    }

    /// A reference model written the obvious way (linear scans), to compare against.
    #[derive(Default)]
    struct Model {
        last_renewal: BTreeMap<u32, u64>,
        events: Vec<MembershipEvent>,
    }

    impl Model {
        fn expire(&mut self, now: u64, timeout: u64) {
            let mut due: Vec<(u64, u32)> = self
                .last_renewal
                .iter()
                .filter(|(_, &r)| r + timeout <= now)
                .map(|(&n, &r)| (r + timeout, n))
                .collect();
            due.sort();
            for (deadline, n) in due {
                self.last_renewal.remove(&n);
                self.events.push(MembershipEvent::Died {
                    node: NodeId(n),
                    info: info(n),
                    last_seen_ms: deadline - timeout,
                    detected_at_ms: now,
                });
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// The view matches the reference model event for event and answer for answer, and
        /// the lease rules hold directly on its event stream.
        #[test]
        fn matches_model_and_lease_rules(
            timeout in 2u64..60,
            steps in prop::collection::vec((0u64..80, op()), 1..120),
        ) {
            let mut view = MembershipView::new(cfg(timeout)).unwrap();
            let mut model = Model::default();
            let mut now = 0u64;
            let mut prev_now = 0u64;
            let mut events = Vec::new();
            // node -> (last renewal, time of the previous input) for nodes live in the view
            let mut live: BTreeMap<u32, u64> = BTreeMap::new();
            for (dt, op) in steps {
                now += dt;
                model.expire(now, timeout);
                let got = match op {
                    Op::Join(n) => view.handle_join(NodeId(n), info(n), now).map(|_| ()),
                    Op::Heartbeat(n) => view.handle_heartbeat(NodeId(n), now).map(|_| ()),
                    Op::Leave(n) => view.handle_leave(NodeId(n), now),
                    Op::Tick => { view.tick(now); Ok(()) }
                };
                let want = match op {
                    Op::Join(n) => {
                        match model.last_renewal.entry(n) {
                            std::collections::btree_map::Entry::Occupied(_) => {
                                Err(MembershipError::DuplicateNode(NodeId(n)))
                            }
                            std::collections::btree_map::Entry::Vacant(slot) => {
                                slot.insert(now);
                                model.events.push(MembershipEvent::Joined { node: NodeId(n), info: info(n) });
                                Ok(())
                            }
                        }
                    }
                    Op::Heartbeat(n) => match model.last_renewal.get_mut(&n) {
                        Some(r) => { *r = now; Ok(()) }
                        None => Err(MembershipError::UnknownNode(NodeId(n))),
                    },
                    Op::Leave(n) => match model.last_renewal.remove(&n) {
                        Some(_) => {
                            model.events.push(MembershipEvent::Left { node: NodeId(n), info: info(n) });
                            Ok(())
                        }
                        None => Err(MembershipError::UnknownNode(NodeId(n))),
                    },
                    Op::Tick => Ok(()),
                };
                prop_assert_eq!(&got, &want);

                // Direct checks on the events this input produced.
                while let Some(ev) = view.poll_event() {
                    match &ev {
                        MembershipEvent::Joined { node, .. } => {
                            prop_assert!(live.insert(node.0, now).is_none(), "joined twice");
                        }
                        MembershipEvent::Left { node, .. } => {
                            prop_assert!(live.remove(&node.0).is_some(), "left while not live");
                            prop_assert!(matches!(op, Op::Leave(n) if n == node.0));
                        }
                        MembershipEvent::Died { node, last_seen_ms, detected_at_ms, .. } => {
                            let renewal = live.remove(&node.0);
                            prop_assert!(renewal.is_some(), "died while not live");
                            prop_assert_eq!(Some(*last_seen_ms), renewal);
                            prop_assert_eq!(*detected_at_ms, now);
                            let deadline = last_seen_ms + timeout;
                            prop_assert!(now >= deadline, "declared dead before its deadline");
                            prop_assert!(prev_now < deadline, "an earlier input missed the death");
                        }
                    }
                    events.push(ev);
                }
                if let (Op::Heartbeat(n), Ok(())) = (&op, &got) {
                    live.insert(*n, now);
                }
                // Nodes still live in the view have not reached their deadline.
                for (&n, &renewal) in &live {
                    prop_assert!(renewal + timeout > now, "node {} overdue but alive", n);
                    prop_assert_eq!(view.lease_deadline_ms(NodeId(n)), Some(renewal + timeout));
                }
                prop_assert_eq!(
                    view.next_deadline_ms(),
                    live.values().map(|r| r + timeout).min()
                );
                prop_assert_eq!(view.len(), live.len());
                prev_now = now;
            }
            prop_assert_eq!(events, model.events);
        }

        /// A node that renews at least every `timeout - 1` ms never dies, whatever the
        /// other nodes do; a node that then goes silent dies at the first input at or after
        /// its deadline, exactly once.
        #[test]
        fn diligent_node_never_dies_silent_node_dies_once(
            timeout in 2u64..60,
            steps in prop::collection::vec((1u64..1000, op()), 1..100),
            silent_inputs in prop::collection::vec(1u64..40, 1..20),
        ) {
            let mut view = MembershipView::new(cfg(timeout)).unwrap();
            let star = NodeId(99);
            let mut now = 0;
            view.handle_join(star, info(99), now).unwrap();
            let mut last = now;
            for (dt_permille, op) in steps {
                // Each step advances by 0..timeout-1 ms and the diligent node renews.
                now += dt_permille * (timeout - 1) / 1000;
                match op {
                    Op::Join(n) => { let _ = view.handle_join(NodeId(n), info(n), now); }
                    Op::Heartbeat(n) => { let _ = view.handle_heartbeat(NodeId(n), now); }
                    Op::Leave(n) => { let _ = view.handle_leave(NodeId(n), now); }
                    Op::Tick => view.tick(now),
                }
                prop_assert!(now - last < timeout);
                view.handle_heartbeat(star, now).unwrap();
                last = now;
            }
            while let Some(ev) = view.poll_event() {
                let star_event_ok = ev.node() != star || matches!(ev, MembershipEvent::Joined { .. });
                prop_assert!(star_event_ok, "the diligent node left or died: {:?}", ev);
            }
            // Now it goes silent; ticks at random later times.
            let deadline = last + timeout;
            let mut deaths = 0;
            for dt in silent_inputs {
                now += dt;
                view.tick(now);
                while let Some(ev) = view.poll_event() {
                    if let MembershipEvent::Died { node, last_seen_ms, detected_at_ms, .. } = ev {
                        if node == star {
                            deaths += 1;
                            prop_assert_eq!(last_seen_ms, last);
                            prop_assert_eq!(detected_at_ms, now);
                            prop_assert!(now >= deadline);
                        }
                    }
                }
                if now >= deadline {
                    prop_assert_eq!(deaths, 1, "dead by the first tick at or after the deadline");
                } else {
                    prop_assert_eq!(deaths, 0);
                }
            }
        }
    }
}
