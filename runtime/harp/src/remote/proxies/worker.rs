//! The master's stand-in for a worker in a node process ([`WorkerProxy`]): micro-tasks out,
//! executors created, released, adopted and saved on request, and the wire form of tasks.

use super::*;

/// Stands (on the master) for a worker in a node process.
pub(crate) struct WorkerProxy<A>(PhantomData<fn() -> A>);

/// What a [`WorkerProxy`] holds: the link to its node, the replies awaited on it, the
/// address the node listens at (where a state it parks is fetched from) and the master's
/// end of parked states.
pub(crate) struct WorkerLink {
    pub link: Link,
    pub pending: Arc<PendingReplies>,
    pub listen_addr: String,
    pub courier: MasterCourier,
}

impl<A> WorkerProxy<A> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<A: App> Actor for WorkerProxy<A> {
    type Msg = WorkerMsg<A>;
    type State = WorkerLink;
    type Arguments = WorkerLink;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let WorkerLink {
            link,
            pending,
            listen_addr,
            courier,
        } = state;
        match msg {
            WorkerMsg::Run(tasks) => {
                let message = Message::RunTasks {
                    tasks: tasks_to_wire::<A>(tasks)?,
                };
                match link.send(&message) {
                    Ok(()) => {}
                    // The node's link broke: its death (lease, closed link) is reported to
                    // the master, which runs these tasks again elsewhere or ends the job.
                    Err(e @ harp_net::NetError::ConnectionLost { .. }) => {
                        tracing::warn!(error = %e, "could not send micro-tasks to a worker node");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            WorkerMsg::Create {
                executor,
                saved,
                created,
            } => {
                // On the control stream, before any micro-task sent to it afterwards (a large
                // saved state is parked here and fetched by the node).
                let (from_checkpoint, (state, fetch)) = match saved {
                    Some(saved) => (Some(saved.checkpoint), courier.carry(saved.state)),
                    None => (None, (Vec::new(), None)),
                };
                let request = |request_id| Message::CreateExecutor {
                    request_id,
                    executor: executor.0,
                    from_checkpoint,
                    state,
                    fetch,
                };
                let gone = format!("the node creating {executor} went away");
                ask_node(link, pending, (Pending::Adopted, request), created, gone).await;
            }
            WorkerMsg::Release { executor, reply } => {
                let (tx, rx) = oneshot::channel();
                let request_id = pending.register(Pending::Released(tx));
                link.send(&Message::ReleaseExecutor {
                    request_id,
                    executor: executor.0,
                })?;
                let from_addr = listen_addr.clone();
                crate::spawn::spawn(async move {
                    let released = match rx.await {
                        Ok(ReleaseResult::Released { state, pending }) => {
                            tasks_from_wire::<A>(pending).map(|pending| ReleasedExecutor {
                                executor: ExecutorBody::Saved(state),
                                pending,
                            })
                        }
                        Ok(ReleaseResult::Parked {
                            transfer,
                            bytes,
                            pending,
                        }) => tasks_from_wire::<A>(pending).map(|pending| ReleasedExecutor {
                            executor: ExecutorBody::Parked(harp_wire::StateFetch {
                                from_addr,
                                transfer,
                                bytes,
                            }),
                            pending,
                        }),
                        Ok(ReleaseResult::Refused(why)) => Err(HarpError::InvalidConfig(why)),
                        Err(_) => Err(HarpError::Remote(format!(
                            "the node hosting {executor} went away during its move"
                        ))),
                    };
                    let _ = reply.send(released);
                });
            }
            WorkerMsg::Adopt {
                executor,
                released,
                adopted,
            } => {
                let (state, fetch) = match released.executor {
                    // A large state the master holds (a resumed job's): the node fetches it
                    // from here rather than in one message.
                    ExecutorBody::Saved(state) => courier.carry(state),
                    ExecutorBody::Parked(fetch) => (Vec::new(), Some(fetch)),
                    ExecutorBody::Live(e) => match e.save_state() {
                        Ok(state) => (state, None),
                        Err(source) => {
                            let _ = adopted.send(Err(HarpError::InvalidConfig(format!(
                                "cannot save the state of {executor} to move it: {source}"
                            ))));
                            return Ok(());
                        }
                    },
                };
                let pending_tasks = match tasks_to_wire::<A>(released.pending) {
                    Ok(tasks) => tasks,
                    Err(e) => {
                        let _ = adopted.send(Err(e));
                        return Ok(());
                    }
                };
                let request = |request_id| Message::AdoptExecutor {
                    request_id,
                    executor: executor.0,
                    state,
                    fetch,
                    pending: pending_tasks,
                };
                let gone = format!("the node adopting {executor} went away");
                ask_node(link, pending, (Pending::Adopted, request), adopted, gone).await;
            }
            WorkerMsg::Save { executor, reply } => {
                let (tx, rx) = oneshot::channel();
                let request_id = pending.register(Pending::ExecutorSaved(tx));
                link.send(&Message::SaveExecutor {
                    request_id,
                    executor: executor.0,
                })?;
                let (node_addr, courier) = (listen_addr.clone(), courier.clone());
                crate::spawn::spawn(async move {
                    let saved = match rx.await {
                        Ok(ExecutorSaveResult::Saved(state)) => Ok(state),
                        Ok(ExecutorSaveResult::Parked { transfer, bytes }) => {
                            let fetch = harp_wire::StateFetch {
                                from_addr: node_addr.clone(),
                                transfer,
                                bytes,
                            };
                            let what = executor.to_string();
                            courier.dialer.fetch(&node_addr, &fetch, &what).await
                        }
                        Ok(ExecutorSaveResult::Refused(why)) => Err(HarpError::Remote(why)),
                        Err(_) => Err(HarpError::Remote(format!(
                            "the node hosting {executor} went away before it sent its state"
                        ))),
                    };
                    let _ = reply.send(saved);
                });
            }
            WorkerMsg::Expect { .. } | WorkerMsg::Forget { .. } => {
                tracing::debug!("the master's worker proxy carries neither expect nor forget (its node sends them itself)");
            }
        }
        Ok(())
    }
}

/// How an awaited answer is filed among a link's pending replies (a [`Pending`] variant).
pub(super) type Filing<T> = fn(oneshot::Sender<Result<T, HarpError>>) -> Pending;

/// Sends a worker node the request `request` makes of its id, and hands its answer to
/// `answer` once it comes (`waiting` files the awaited reply); if the send fails, that
/// error, and if the node goes away first, `gone`.
/// The request brings an executor (`CreateExecutor`, `AdoptExecutor`), so [`send_sized`]
/// keeps it on the control stream, ahead of the micro-tasks dispatched to it next.
pub(super) async fn ask_node<T: Send + 'static>(
    link: &Link,
    pending: &PendingReplies,
    (waiting, request): (Filing<T>, impl FnOnce(u64) -> Message),
    answer: oneshot::Sender<Result<T, HarpError>>,
    gone: String,
) {
    let (tx, rx) = oneshot::channel();
    let request_id = pending.register(waiting(tx));
    if let Err(e) = send_sized(link, request(request_id)).await {
        pending.forget(request_id);
        let _ = answer.send(Err(e));
        return;
    }
    crate::spawn::spawn(async move {
        let _ = answer.send(rx.await.unwrap_or(Err(HarpError::Remote(gone))));
    });
}

/// Encodes dispatched micro-tasks (the app's arguments with postcard).
pub(crate) fn tasks_to_wire<A: App>(
    tasks: Vec<crate::worker::TaskEnvelope<A::Args>>,
) -> Result<Vec<TaskEnvelope>, HarpError> {
    tasks
        .into_iter()
        .map(|t| {
            Ok(TaskEnvelope::new(
                t.task,
                t.executor,
                t.version,
                to_bytes(&t.args)?,
            ))
        })
        .collect()
}
