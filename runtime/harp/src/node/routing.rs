//! Where a node sends parameter traffic: the shard→server map and the servers' addresses.

use crate::server::ServerMsg;
use harp_core::{ParamKey, ServerId, ShardMap};
use ractor::ActorRef;
use std::collections::BTreeMap;

/// The node's view of the parameter servers.
pub(crate) struct Routing {
    pub shard_map: ShardMap,
    pub servers: BTreeMap<ServerId, ActorRef<ServerMsg>>,
}

impl Routing {
    /// The server responsible for `key` and its address.
    pub(crate) fn route(&self, key: ParamKey) -> (ServerId, Option<&ActorRef<ServerMsg>>) {
        let server = self.shard_map.server_of_key(key);
        (server, self.servers.get(&server))
    }
}
