//! harp's membership shell: who is in a job, and who died (DESIGN §2.4, §3).
//!
//! The rules live in the core's [`MembershipView`](harp_core::MembershipView) (leases,
//! expiry, event order). This crate does the IO around them, behind one object-safe trait,
//! [`MembershipBackend`], with two implementations:
//!
//! | backend | where the member table lives | how a node stays in | how a death is seen |
//! |---|---|---|---|
//! | [`EmbeddedMembership`] (default) | a tokio task on the master, running the core view | heartbeats to that task | the view's lease expiry, ticked at its next deadline |
//! | [`EtcdMembership`] (`--etcd http://HOST:PORT`) | etcd keys `/harp/jobs/<job>/members/<node>` | an etcd lease with keep-alive | the key deleted by lease expiry, seen by a watch |
//!
//! Both report [`MembershipEvent`]s: `Joined`, `Left` (graceful leave or removal by the
//! master) and `Died` (lease expired). A node registers with
//! [`register`](MembershipBackend::register) and gets a [`LeaseHandle`] that renews the lease
//! in the background until [`LeaseHandle::leave`] (graceful: `Left`) or until it is dropped
//! (the lease lapses: `Died`, as after a crash).
//!
//! Every call has a deadline: nothing here waits forever on a peer or on etcd.
//!
//! Beside the members, a job's etcd prefix holds its desired size
//! (`/harp/jobs/<job>/desired_nodes`, [`desired_nodes_key`]): a node count an outside
//! scheduler writes and the master follows ([`EtcdMembership::watch_desired_nodes`]).

mod desired;
mod embedded;
mod error;
mod etcd;
mod lease;
mod watch;

pub mod test_server;

pub use desired::{desired_nodes_key, parse_desired_nodes, DesiredNodesWatch, DESIRED_NODES_MAX};
pub use embedded::EmbeddedMembership;
pub use error::MembershipBackendError;
pub use etcd::{EtcdMembership, EtcdOptions};
pub use harp_core::{LeaseGrant, MemberInfo, MembershipConfig, MembershipEvent, NodeId, NodeRoles};
pub use lease::LeaseHandle;
pub use watch::MembershipWatch;

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what the object-safe [`MembershipBackend`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A membership service as the master and the nodes use it. Object-safe, so the runtime
/// can hold a `Box<dyn MembershipBackend>` chosen at startup (embedded or etcd).
pub trait MembershipBackend: Send + Sync {
    /// The lease timing this backend enforces.
    fn config(&self) -> &MembershipConfig;

    /// Puts `node` in the job and starts renewing its lease in the background. The lease
    /// is held until [`LeaseHandle::leave`] or until the handle is dropped.
    fn register(
        &self,
        node: NodeId,
        info: MemberInfo,
    ) -> BoxFuture<'_, Result<LeaseHandle, MembershipBackendError>>;

    /// A stream of membership events: first one `Joined` for every current member (in
    /// node id order), then every change as it happens.
    fn watch(&self) -> BoxFuture<'_, Result<MembershipWatch, MembershipBackendError>>;

    /// The current members, in node id order.
    fn members(&self) -> BoxFuture<'_, Result<Vec<(NodeId, MemberInfo)>, MembershipBackendError>>;

    /// Removes `node` from the job on the master's initiative; watchers see `Left`.
    fn revoke(&self, node: NodeId) -> BoxFuture<'_, Result<(), MembershipBackendError>>;
}
