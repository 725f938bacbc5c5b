//! Spawning tasks behind one box.
//!
//! Much of the runtime is generic over the app (`A: App`), so every future it spawns is a
//! distinct type per app, and `tokio::spawn` compiles its whole task machinery (harness,
//! poll, cancel, join) once per future type: about a quarter of the code generated for a
//! crate with five apps. Boxing the future first leaves one instantiation per output type.
//! The cost is one allocation per spawned task, beside tokio's own.

use std::future::Future;
use std::pin::Pin;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

/// A spawned future behind one pointer.
type BoxedTask<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// `tokio::spawn(future)`, boxed first.
pub(crate) fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let task: BoxedTask<F::Output> = Box::pin(future);
    tokio::spawn(task)
}

/// `handle.spawn(future)`, boxed first.
pub(crate) fn spawn_on<F>(handle: &Handle, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let task: BoxedTask<F::Output> = Box::pin(future);
    handle.spawn(task)
}
