//! Convolutional-network layer kernels: 2-D convolution, ReLU, 2×2 max pooling,
//! dense (fully connected) layers and softmax cross-entropy, forward and backward.
//!
//! This module owns the layer descriptors ([`Conv2d`], [`MaxPool2x2`], [`Dense`]) and
//! their validation, the reusable scratch buffers ([`CnnScratch`]) and the fast CPU
//! kernels; [`reference`](mod@reference) holds plain f64 versions for the tests.
//!
//! Conventions shared by every kernel here:
//! * activations are `f32`, **NCHW** row-major: element `(n, c, y, x)` of a
//!   `batch × channels × height × width` tensor is at `((n*C + c)*H + y)*W + x`;
//!   dense activations are `batch × features` row-major;
//! * the batch size is an explicit argument (`batch`), except for the loss, whose
//!   batch is `labels.len()` as in [`mlr`](crate::mlr); a batch of 0 is allowed;
//! * convolution weights are `out_channels × in_channels × kernel_h × kernel_w`,
//!   bias `out_channels`; stride 1, zero padding `pad_h`/`pad_w` on each side;
//! * dense weights are `inputs × outputs` row-major and `y = x·W + b` (the layout of
//!   the MLR weights, **not** PyTorch's `out × in` with `x·Wᵀ`);
//! * the loss and every gradient are **sums** over the batch, not means (as in
//!   [`mlr`](crate::mlr)); [`softmax_xent_scaled`] folds a factor such as `1/batch`
//!   into the logit gradient, and since everything downstream is linear in it, all
//!   weight gradients come out scaled the same way;
//! * backward kernels **overwrite** their gradient outputs (they do not accumulate);
//! * every kernel validates all lengths and shapes first and writes nothing on error.
//!
//! The fast convolution lowers a chunk of the batch at a time to a matrix (im2col)
//! and runs one `matrixmultiply` sgemm per chunk, so the GEMMs are batch-level while
//! the lowered matrix stays cache-sized. Everything runs on the calling thread.

mod act;
mod conv;
mod dense;
mod gemm;
mod loss;
mod lower;
mod pool;
mod shape;

pub mod reference;

pub use act::{relu_backward, relu_backward_in_place, relu_forward, relu_in_place};
pub use conv::{conv2d_backward, conv2d_forward};
pub use dense::{dense_backward, dense_forward};
pub use loss::{softmax_xent, softmax_xent_evaluate, softmax_xent_scaled};
pub use pool::{maxpool2x2_backward, maxpool2x2_forward};
#[cfg(feature = "cuda")]
pub(crate) use shape::LayerLens;
pub use shape::{Conv2d, Dense, MaxPool2x2};

/// Gradient outputs of a layer with weights (convolution or dense), all overwritten
/// by the backward kernel.
#[derive(Debug)]
pub struct LayerGrads<'a> {
    /// Gradient with respect to the layer input (same layout as the input), or
    /// `None` to skip it (e.g. for the first layer of a network).
    pub dx: Option<&'a mut [f32]>,
    /// Gradient with respect to the weights (same layout as the weights).
    pub dw: &'a mut [f32],
    /// Gradient with respect to the bias.
    pub db: &'a mut [f32],
}

/// Reusable buffers for the convolution kernels, so the hot loop does not allocate.
///
/// One scratch can serve every layer of a network (calls are sequential); its
/// buffers only grow, to the needs of the largest layer seen. Contents carry no
/// meaning between calls.
#[derive(Clone, Debug, Default)]
pub struct CnnScratch {
    /// The lowered input of one batch chunk (im2col, or its transpose), or the
    /// lowered input gradient.
    col: Vec<f32>,
    /// The GEMM output / output gradient of one batch chunk, channel-major.
    tmp: Vec<f32>,
    /// The output gradient of one batch chunk, position-major (`tmp` transposed).
    tmp_t: Vec<f32>,
    /// The transposed weights.
    w_t: Vec<f32>,
}

/// Views into the four [`CnnScratch`] buffers.
pub(crate) struct ScratchBufs<'a> {
    pub col: &'a mut [f32],
    pub tmp: &'a mut [f32],
    pub tmp_t: &'a mut [f32],
    pub w_t: &'a mut [f32],
}

impl CnnScratch {
    /// Empty scratch; it grows on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The buffers, grown to at least the given lengths (`col`, `tmp`, `tmp_t`,
    /// `w_t`). Contents are unspecified.
    pub(crate) fn buffers(&mut self, lens: [usize; 4]) -> ScratchBufs<'_> {
        fn grow(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            &mut buf[..len]
        }
        ScratchBufs {
            col: grow(&mut self.col, lens[0]),
            tmp: grow(&mut self.tmp, lens[1]),
            tmp_t: grow(&mut self.tmp_t, lens[2]),
            w_t: grow(&mut self.w_t, lens[3]),
        }
    }
}
