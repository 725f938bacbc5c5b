//! Shared test helpers: proptest strategies that generate every `Message` variant with
//! arbitrary contents (any f32 bit pattern, any unicode, empty and non-empty collections).

#![allow(dead_code)]

use harp_wire::*;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::strategy::Union;

pub fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "\\PC{0,24}", ".{0,64}"]
}

pub fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..96)
}

pub fn arb_key() -> impl Strategy<Value = ParamKeyWire> {
    (any::<u16>(), any::<u64>()).prop_map(|(table, row)| ParamKeyWire { table, row })
}

pub fn arb_applied_part() -> impl Strategy<Value = AppliedPartWire> {
    (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(node, seq, epoch)| AppliedPartWire {
        node,
        seq,
        epoch,
    })
}

pub fn arb_row() -> impl Strategy<Value = RowWire> {
    prop_oneof![
        vec(any::<u32>().prop_map(f32::from_bits), 0..24).prop_map(RowWire::F32),
        vec(any::<i64>(), 0..24).prop_map(RowWire::I64),
    ]
}

pub fn arb_updates() -> impl Strategy<Value = Vec<(ParamKeyWire, RowWire)>> {
    vec((arb_key(), arb_row()), 0..8)
}

pub fn arb_role() -> impl Strategy<Value = NodeRole> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(worker, server, master)| NodeRole {
        worker,
        server,
        master,
    })
}

pub fn arb_hello() -> impl Strategy<Value = Hello> {
    (
        any::<u32>(),
        any::<[u8; 16]>(),
        any::<u32>(),
        arb_role(),
        arb_string(),
    )
        .prop_map(
            |(protocol_version, job_id, node_id, role, listen_addr)| Hello {
                protocol_version,
                job_id,
                node_id,
                role,
                listen_addr,
            },
        )
}

pub fn arb_welcome() -> impl Strategy<Value = Welcome> {
    (
        any::<u32>(),
        any::<[u8; 16]>(),
        any::<u32>(),
        arb_string(),
        vec(arb_string(), 0..4),
        vec(arb_string(), 0..4),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(
            |(
                protocol_version,
                job_id,
                assigned_node_id,
                app_name,
                app_tables,
                app_settings,
                lease_timeout_ms,
                heartbeat_interval_ms,
            )| Welcome {
                protocol_version,
                job_id,
                assigned_node_id,
                app_name,
                app_tables,
                app_settings,
                lease_timeout_ms,
                heartbeat_interval_ms,
            },
        )
}

pub fn arb_assignment() -> impl Strategy<Value = Assignment> {
    (
        (any::<u32>(), any::<u32>(), any::<u32>()),
        any::<Option<u32>>(),
        vec(any::<u32>(), 0..16),
        any::<Option<u32>>(),
        vec(any::<u32>(), 0..16),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |((e, w, s), worker, executors, server, shards, (server_recovery, worker_recovery))| {
                Assignment {
                    job: JobInfoWire {
                        num_executors: e,
                        num_workers: w,
                        num_servers: s,
                    },
                    worker,
                    executors,
                    server,
                    shards,
                    server_recovery,
                    worker_recovery,
                }
            },
        )
}

pub fn arb_placement() -> impl Strategy<Value = Placement> {
    (
        any::<u64>(),
        any::<u32>(),
        vec(
            (any::<u32>(), any::<u32>()).prop_map(|(shard, server)| ShardPlace { shard, server }),
            0..16,
        ),
        vec(
            (any::<u32>(), any::<u32>(), arb_string()).prop_map(
                |(server, node_id, listen_addr)| ServerPlace {
                    server,
                    node_id,
                    listen_addr,
                },
            ),
            0..4,
        ),
    )
        .prop_map(|(epoch, num_shards, shards, servers)| Placement {
            epoch,
            num_shards,
            shards,
            servers,
        })
}

pub fn arb_task() -> impl Strategy<Value = TaskEnvelope> {
    (any::<u64>(), any::<u32>(), any::<u64>(), arb_bytes()).prop_map(
        |(task, executor, version, args)| TaskEnvelope {
            task,
            executor,
            version,
            args,
        },
    )
}

pub fn arb_completion() -> impl Strategy<Value = CompletionWire> {
    (any::<u64>(), any::<u32>(), any::<u64>(), arb_bytes()).prop_map(
        |(task, executor, dispatched_at, output)| CompletionWire {
            task,
            executor,
            dispatched_at,
            output,
        },
    )
}

/// Every variant, with equal weight. Keep in sync with `MessageKind::ALL` (checked by the
/// round-trip test, which asserts that every kind was generated).
pub fn arb_message() -> impl Strategy<Value = Message> {
    Union::new(vec![
        arb_hello().prop_map(Message::Hello).boxed(),
        arb_welcome().prop_map(Message::Welcome).boxed(),
        arb_string()
            .prop_map(|reason| Message::Refused { reason })
            .boxed(),
        arb_assignment().prop_map(Message::Assign).boxed(),
        arb_placement().prop_map(Message::Placement).boxed(),
        (any::<u32>(), any::<u64>())
            .prop_map(|(node_id, launch_id)| Message::Ready { node_id, launch_id })
            .boxed(),
        vec(arb_task(), 0..6)
            .prop_map(|tasks| Message::RunTasks { tasks })
            .boxed(),
        vec(arb_completion(), 0..6)
            .prop_map(|completions| Message::Completed { completions })
            .boxed(),
        (arb_string(), proptest::option::of(any::<u32>()))
            .prop_map(|(message, unreachable_server)| Message::Failed {
                message,
                unreachable_server,
            })
            .boxed(),
        (
            any::<u64>(),
            any::<u32>(),
            vec(arb_key(), 0..16),
            (any::<u32>(), any::<u32>()),
        )
            .prop_map(|(request_id, server, keys, (part, parts))| Message::Get {
                request_id,
                server,
                keys,
                part,
                parts,
            })
            .boxed(),
        (
            any::<u64>(),
            prop_oneof![
                vec(arb_row(), 0..8).prop_map(RowsResult::Ok),
                arb_string().prop_map(RowsResult::Err)
            ],
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(request_id, rows, part, parts)| Message::Rows {
                request_id,
                rows,
                part,
                parts,
            })
            .boxed(),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            (any::<u64>(), any::<bool>(), any::<u64>(), any::<bool>()),
            arb_updates(),
        )
            .prop_map(
                |(
                    request_id,
                    server,
                    node_id,
                    (flush_id, staged, held_from, forwarded),
                    updates,
                )| {
                    Message::Apply {
                        request_id,
                        server,
                        node_id,
                        flush_id,
                        staged,
                        held_from,
                        forwarded,
                        updates,
                    }
                },
            )
            .boxed(),
        (
            any::<u64>(),
            proptest::option::of(arb_string()),
            proptest::option::of(any::<u64>()),
        )
            .prop_map(|(request_id, error, save_epoch)| Message::Applied {
                request_id,
                error,
                save_epoch,
            })
            .boxed(),
        (any::<u64>(), any::<u32>())
            .prop_map(|(request_id, server)| Message::Dump { request_id, server })
            .boxed(),
        (any::<u64>(), arb_updates(), any::<u32>(), any::<u32>())
            .prop_map(|(request_id, rows, part, parts)| Message::DumpRows {
                request_id,
                rows,
                part,
                parts,
            })
            .boxed(),
        (any::<u32>(), any::<u64>())
            .prop_map(|(node_id, lease_seq)| Message::Heartbeat { node_id, lease_seq })
            .boxed(),
        (any::<u32>(), any::<u64>())
            .prop_map(|(node_id, lease_seq)| Message::HeartbeatAck { node_id, lease_seq })
            .boxed(),
        arb_string()
            .prop_map(|reason| Message::Shutdown { reason })
            .boxed(),
        (
            any::<bool>(),
            arb_string(),
            proptest::option::of((any::<bool>(), any::<u64>())),
        )
            .prop_map(|(ok, message, stopped)| Message::JobEnded {
                ok,
                message,
                stopped: stopped.map(|(started, tasks_completed)| StoppedWire {
                    started,
                    tasks_completed,
                }),
            })
            .boxed(),
        (any::<u64>(), any::<u32>())
            .prop_map(|(request_id, executor)| Message::ReleaseExecutor {
                request_id,
                executor,
            })
            .boxed(),
        (
            any::<u64>(),
            any::<u32>(),
            prop_oneof![
                (vec(any::<u8>(), 0..64), vec(arb_task(), 0..4))
                    .prop_map(|(state, pending)| ReleaseResult::Released { state, pending }),
                (any::<u64>(), any::<u64>(), vec(arb_task(), 0..4)).prop_map(
                    |(transfer, bytes, pending)| ReleaseResult::Parked {
                        transfer,
                        bytes,
                        pending
                    }
                ),
                arb_string().prop_map(ReleaseResult::Refused),
            ],
        )
            .prop_map(|(request_id, executor, result)| Message::ExecutorReleased {
                request_id,
                executor,
                result,
            })
            .boxed(),
        (
            (any::<u64>(), any::<u32>()),
            vec(any::<u8>(), 0..64),
            proptest::option::of(arb_state_fetch()),
            vec(arb_task(), 0..4),
        )
            .prop_map(
                |((request_id, executor), state, fetch, pending)| Message::AdoptExecutor {
                    request_id,
                    executor,
                    state,
                    fetch,
                    pending,
                },
            )
            .boxed(),
        (any::<u64>(), proptest::option::of(arb_string()))
            .prop_map(|(request_id, error)| Message::ExecutorAdopted { request_id, error })
            .boxed(),
        (any::<u64>(), any::<u64>())
            .prop_map(|(request_id, transfer)| Message::FetchState {
                request_id,
                transfer,
            })
            .boxed(),
        (
            (any::<u64>(), any::<u64>(), any::<u64>()),
            vec(any::<u8>(), 0..64),
        )
            .prop_map(|((request_id, total, offset), data)| Message::StateChunk {
                request_id,
                total,
                offset,
                data,
            })
            .boxed(),
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>())
            .prop_map(
                |(request_id, shard, num_shards, to_server)| Message::HandOffShard {
                    request_id,
                    shard,
                    num_shards,
                    to_server,
                },
            )
            .boxed(),
        (
            any::<u64>(),
            prop_oneof![
                (any::<u64>(), any::<u64>())
                    .prop_map(|(rows, bytes)| HandOffResult::Moved { rows, bytes }),
                arb_string().prop_map(HandOffResult::Refused),
                arb_string().prop_map(HandOffResult::Unconfirmed),
            ],
        )
            .prop_map(|(request_id, result)| Message::ShardHandedOff { request_id, result })
            .boxed(),
        (
            any::<u64>(),
            any::<u32>(),
            vec(
                (
                    arb_key(),
                    arb_row(),
                    arb_opt_state(),
                    proptest::option::of(arb_row()),
                )
                    .prop_map(|(key, value, opt, saved)| ShardRowWire {
                        key,
                        value,
                        opt,
                        saved,
                    }),
                0..4,
            ),
        )
            .prop_flat_map(|(request_id, shard, rows)| {
                let parts = proptest::collection::vec(
                    (
                        any::<u32>(),
                        any::<u64>(),
                        proptest::collection::vec(arb_key(), 0..3),
                    )
                        .prop_map(|(node, seq, keys)| PartKeysWire {
                            node,
                            seq,
                            keys,
                        }),
                    0..3,
                );
                (proptest::option::of((any::<u64>(), any::<u32>())), parts).prop_map(
                    move |(restore, parts)| Message::TakeOverShard {
                        request_id,
                        shard,
                        rows: rows.clone(),
                        restore: restore.map(|(generation, num_shards)| RestoreWire {
                            generation,
                            num_shards,
                        }),
                        parts,
                    },
                )
            })
            .boxed(),
        any::<u64>()
            .prop_map(|request_id| Message::TookOver { request_id })
            .boxed(),
        (any::<u32>(), any::<u32>())
            .prop_map(|(shard, server)| Message::Reroute { shard, server })
            .boxed(),
        any::<u32>()
            .prop_map(|node_id| Message::Leaving { node_id })
            .boxed(),
        (any::<u64>(), any::<u32>())
            .prop_map(|(request_id, server)| Message::DrainServer { request_id, server })
            .boxed(),
        any::<u64>()
            .prop_map(|request_id| Message::ServerDrained { request_id })
            .boxed(),
        (any::<u32>(), vec(any::<u32>(), 0..4))
            .prop_map(|(add, remove)| Message::ScaleCommand { add, remove })
            .boxed(),
        (any::<bool>(), arb_string())
            .prop_map(|(ok, message)| Message::ScaleDone { ok, message })
            .boxed(),
        (any::<u64>(), any::<u32>())
            .prop_map(|(request_id, server)| Message::CheckpointDistances { request_id, server })
            .boxed(),
        (
            any::<u64>(),
            prop_oneof![
                vec((arb_key(), any::<u64>().prop_map(f64::from_bits)), 0..8)
                    .prop_map(DistancesResult::Ok),
                arb_string().prop_map(DistancesResult::Err),
            ],
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(request_id, result, part, parts)| Message::Distances {
                request_id,
                result,
                part,
                parts,
            })
            .boxed(),
        (
            any::<u64>(),
            any::<u32>(),
            vec(arb_key(), 0..16),
            (any::<u32>(), any::<u32>(), any::<u64>()),
        )
            .prop_map(
                |(request_id, server, keys, (part, parts, recorded_epoch))| {
                    Message::CheckpointSave {
                        request_id,
                        server,
                        keys,
                        part,
                        parts,
                        recorded_epoch,
                    }
                },
            )
            .boxed(),
        (
            any::<u64>(),
            prop_oneof![
                (
                    arb_updates(),
                    vec(arb_key(), 0..8),
                    any::<u64>(),
                    vec(arb_applied_part(), 0..8)
                )
                    .prop_map(|(saved, not_owned, epoch, applied)| {
                        SaveResult::Ok {
                            saved,
                            not_owned,
                            epoch,
                            applied,
                        }
                    }),
                arb_string().prop_map(SaveResult::Err),
            ],
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(request_id, result, part, parts)| Message::Saved {
                request_id,
                result,
                part,
                parts,
            })
            .boxed(),
        (
            any::<u64>(),
            any::<u32>(),
            vec((arb_key(), proptest::option::of(arb_row())), 0..8),
        )
            .prop_map(|(request_id, server, rows)| Message::ResetRows {
                request_id,
                server,
                rows,
            })
            .boxed(),
        (any::<u64>(), proptest::option::of(arb_string()))
            .prop_map(|(request_id, error)| Message::ResetDone { request_id, error })
            .boxed(),
        any::<u32>()
            .prop_map(|server| Message::ServerLost { server })
            .boxed(),
        any::<u32>()
            .prop_map(|server| Message::ServerLeft { server })
            .boxed(),
        (any::<u32>(), any::<u32>(), any::<u32>())
            .prop_map(|(server, shard, to_server)| Message::ShardRelocated {
                server,
                shard,
                to_server,
            })
            .boxed(),
        any::<u32>()
            .prop_map(|server| Message::ServerAwaited { server })
            .boxed(),
        (
            any::<u64>(),
            vec(any::<u32>(), 0..4),
            vec(arb_completion(), 0..4),
        )
            .prop_map(|(flush_id, servers, completions)| Message::FlushStaged {
                flush_id,
                servers,
                completions,
            })
            .boxed(),
        (any::<u64>(), any::<u32>(), any::<u32>(), any::<u64>())
            .prop_map(
                |(request_id, server, node_id, flush_id)| Message::CommitFlush {
                    request_id,
                    server,
                    node_id,
                    flush_id,
                },
            )
            .boxed(),
        (any::<u64>(), proptest::option::of(arb_string()))
            .prop_map(|(request_id, error)| Message::FlushCommitted { request_id, error })
            .boxed(),
        (any::<u32>(), any::<u32>())
            .prop_map(|(server, node_id)| Message::DropStaged { server, node_id })
            .boxed(),
        (
            (any::<u64>(), any::<u32>()),
            proptest::option::of(any::<u64>()),
            vec(any::<u8>(), 0..64),
            proptest::option::of(arb_state_fetch()),
        )
            .prop_map(|((request_id, executor), from_checkpoint, state, fetch)| {
                Message::CreateExecutor {
                    request_id,
                    executor,
                    from_checkpoint,
                    state,
                    fetch,
                }
            })
            .boxed(),
        (
            any::<u32>(),
            any::<u64>(),
            vec(arb_key(), 0..8),
            vec(arb_applied_part(), 0..8),
        )
            .prop_map(|(server, epoch, keys, applied)| Message::RowsSaved {
                server,
                epoch,
                keys,
                applied,
            })
            .boxed(),
        (any::<u64>(), any::<u32>())
            .prop_map(|(request_id, server)| Message::LostUpdatesQuery { request_id, server })
            .boxed(),
        (
            any::<u64>(),
            prop_oneof![
                vec((arb_key(), vec((any::<u64>(), arb_row()), 0..3)), 0..4)
                    .prop_map(LostUpdatesResult::Ok),
                arb_string().prop_map(LostUpdatesResult::Inexact),
            ],
            any::<u32>(),
            any::<u32>(),
        )
            .prop_map(|(request_id, result, part, parts)| Message::LostUpdates {
                request_id,
                result,
                part,
                parts,
            })
            .boxed(),
        (any::<u64>(), any::<u32>())
            .prop_map(|(request_id, executor)| Message::SaveExecutor {
                request_id,
                executor,
            })
            .boxed(),
        (
            any::<u64>(),
            prop_oneof![
                vec(any::<u8>(), 0..64).prop_map(ExecutorSaveResult::Saved),
                (any::<u64>(), any::<u64>())
                    .prop_map(|(transfer, bytes)| ExecutorSaveResult::Parked { transfer, bytes }),
                arb_string().prop_map(ExecutorSaveResult::Refused),
            ],
        )
            .prop_map(|(request_id, result)| Message::ExecutorSaved { request_id, result })
            .boxed(),
        any::<u64>()
            .prop_map(|request_id| Message::StatsQuery { request_id })
            .boxed(),
        (any::<u64>(), vec(any::<u8>(), 0..64))
            .prop_map(|(request_id, counters)| Message::Stats {
                request_id,
                counters,
            })
            .boxed(),
        vec(any::<u8>(), 0..64)
            .prop_map(|counters| Message::StatsReport { counters })
            .boxed(),
    ])
}

fn arb_opt_state() -> impl Strategy<Value = OptStateWire> {
    prop_oneof![
        Just(OptStateWire::None),
        vec(any::<f32>(), 0..8).prop_map(|accum| OptStateWire::AdaGrad { accum }),
        (
            vec(any::<f32>(), 0..8),
            vec(any::<f32>(), 0..8),
            any::<u64>()
        )
            .prop_map(|(m, v, step)| OptStateWire::Adam { m, v, step }),
    ]
}

/// Bit-exact equality (f32 rows may hold NaNs, which `PartialEq` never equates): two
/// messages are the same iff they encode to the same frame.
pub fn same(a: &Message, b: &Message) -> bool {
    match (encode(a), encode(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Where a parked executor state is fetched from.
fn arb_state_fetch() -> impl Strategy<Value = StateFetch> {
    (arb_string(), any::<u64>(), any::<u64>()).prop_map(|(from_addr, transfer, bytes)| StateFetch {
        from_addr,
        transfer,
        bytes,
    })
}
