//! Servers: actors that host parameter-server shards.
//!
//! A server answers batched reads, applies batched aggregated updates under each table's
//! rule, and dumps its rows on request. It checks every delta; bad ones are refused and
//! counted, never applied.

mod store;

use crate::error::HarpError;
use crate::table::TableSet;
use harp_core::{ParamKey, RowData, ServerId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use store::ShardStore;
use tokio::sync::oneshot;

/// Messages a server handles.
pub(crate) enum ServerMsg {
    /// Read rows; the reply holds one row per key, in order.
    Get {
        keys: Vec<ParamKey>,
        reply: oneshot::Sender<Result<Vec<Arc<RowData>>, HarpError>>,
    },
    /// Apply one flush's deltas for this server's shards, all of them before replying.
    Apply {
        updates: Vec<(ParamKey, RowData)>,
        reply: oneshot::Sender<Result<(), HarpError>>,
    },
    /// Every row this server holds.
    Dump {
        reply: oneshot::Sender<Vec<(ParamKey, RowData)>>,
    },
}

pub(crate) struct ServerActor;

pub(crate) struct ServerState {
    id: ServerId,
    store: ShardStore,
}

impl Actor for ServerActor {
    type Msg = ServerMsg;
    type State = ServerState;
    type Arguments = (ServerId, Arc<TableSet>);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (id, tables): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ServerState {
            id,
            store: ShardStore::new(tables),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ServerMsg::Get { keys, reply } => {
                let rows: Result<Vec<_>, _> = keys.iter().map(|k| state.store.get(*k)).collect();
                // A requester that went away no longer needs the answer.
                let _ = reply.send(rows.map_err(HarpError::from));
            }
            ServerMsg::Apply { updates, reply } => {
                let mut first_error = None;
                for (key, delta) in &updates {
                    if let Err(e) = state.store.apply(*key, delta) {
                        tracing::warn!(server = %state.id, %key, error = %e, refused_total = state.store.rejected_updates(), "update refused");
                        first_error.get_or_insert(e);
                    }
                }
                let _ = reply.send(match first_error {
                    None => Ok(()),
                    Some(e) => Err(HarpError::from(e)),
                });
            }
            ServerMsg::Dump { reply } => {
                let _ = reply.send(state.store.dump());
            }
        }
        Ok(())
    }
}
