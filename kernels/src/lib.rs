//! harp's compute kernels.
//!
//! This crate owns the numeric inner loops of harp's applications:
//!
//! * [`mlr`] — minibatch gradient, loss and evaluation for multinomial logistic
//!   regression (softmax regression), the worker-side hot loop of MLR training;
//! * [`cnn`] — convolutional-network layers (convolution, ReLU, 2×2 max pooling,
//!   dense, softmax cross-entropy), forward and backward, NCHW;
//! * [`lda`] — collapsed Gibbs sampling for LDA (sequential sweep, parallel step from
//!   fixed counts, count rebuild, log likelihood);
//! * [`mf`] — matrix factorization (SGD step, ALS half-step, RMSE);
//! * [`optim`] — the element-wise update rules a parameter server applies to rows
//!   of `f32` parameters (`+=`, axpy, AdaGrad, Adam).
//!
//! Every kernel has a CPU implementation, which is always built. Each fast path
//! ships with a plain `f64` reference implementation that the tests compare
//! against. With the `cuda` cargo feature, the `cuda` module adds CUDA versions of
//! all of them that compile their `.cu` sources at run time with
//! NVRTC and load the CUDA driver dynamically: no CUDA toolkit is needed to build,
//! and without a GPU they return [`KernelError::GpuUnavailable`]. The CPU versions
//! stay the default and the fallback; `docs/KERNELS.md` describes both paths.
//!
//! Public functions never panic on bad input: slice lengths, shapes, labels and
//! hyperparameters are validated and reported as a [`KernelError`].

pub mod cnn;
#[cfg(feature = "cuda")]
pub mod cuda;
mod error;
pub mod lda;
pub mod mf;
pub mod mlr;
pub mod optim;

pub use cnn::{
    conv2d_backward, conv2d_forward, dense_backward, dense_forward, maxpool2x2_backward,
    maxpool2x2_forward, relu_backward, relu_backward_in_place, relu_forward, relu_in_place,
    softmax_xent, softmax_xent_evaluate, softmax_xent_scaled, CnnScratch, Conv2d, Dense,
    LayerGrads, MaxPool2x2,
};
#[cfg(feature = "cuda")]
pub use cuda::{CudaSource, Gpu};
pub use error::KernelError;
pub use lda::{gibbs_sweep, sample_parallel, FastRng, LdaParams};
pub use mf::{als_half_step, rmse, sgd_step, Csr, Ratings, Sgd};
pub use mlr::{
    evaluate, gradient, gradient_blocked, gradient_reference, gradient_scaled, MlrScratch,
    MlrShape, GATHER_BELOW_BLOCK_FEATURES,
};
pub use optim::{adagrad_step, adam_step, add_assign, axpy, AdaGrad, Adam};
