//! harp's compute kernels.
//!
//! This crate owns the numeric inner loops of harp's applications:
//!
//! * [`mlr`] — minibatch gradient, loss and evaluation for multinomial logistic
//!   regression (softmax regression), the worker-side hot loop of MLR training;
//! * [`optim`] — the element-wise update rules a parameter server applies to rows
//!   of `f32` parameters (`+=`, axpy, AdaGrad, Adam).
//!
//! Every kernel has a CPU implementation, which is always built. Each fast path
//! ships with a plain `f64` reference implementation that the tests compare
//! against. CUDA versions of these kernels will come later behind a `cuda` cargo
//! feature; the CPU versions stay the default and the fallback.
//!
//! Public functions never panic on bad input: slice lengths, shapes, labels and
//! hyperparameters are validated and reported as a [`KernelError`].

mod error;
pub mod mlr;
pub mod optim;

pub use error::KernelError;
pub use mlr::{
    evaluate, gradient, gradient_blocked, gradient_reference, gradient_scaled, MlrScratch, MlrShape,
};
pub use optim::{adagrad_step, adam_step, add_assign, axpy, AdaGrad, Adam};
