//! Layer descriptors and their validation. Each descriptor describes one sample;
//! `dims(batch)` checks it and computes every buffer size once (with overflow checks)
//! for the kernels, which then index without further arithmetic checks.

use crate::error::{check_len, KernelError};

/// A 2-D convolution layer: stride 1, zero padding, with bias.
///
/// Input `batch × in_channels × in_h × in_w`, weights
/// `out_channels × in_channels × kernel_h × kernel_w`, bias `out_channels`, output
/// `batch × out_channels × out_h × out_w` with `out_h = in_h + 2·pad_h − kernel_h + 1`
/// (likewise `out_w`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels (filters).
    pub out_channels: usize,
    /// Input height.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// Kernel height.
    pub kernel_h: usize,
    /// Kernel width.
    pub kernel_w: usize,
    /// Zero rows added above and below the input.
    pub pad_h: usize,
    /// Zero columns added left and right of the input.
    pub pad_w: usize,
}

impl Conv2d {
    /// A convolution with a square `kernel × kernel` window and the same padding on
    /// every side, on `size × size` inputs.
    pub fn square(
        in_channels: usize,
        out_channels: usize,
        size: usize,
        kernel: usize,
        pad: usize,
    ) -> Self {
        Self {
            in_channels,
            out_channels,
            in_h: size,
            in_w: size,
            kernel_h: kernel,
            kernel_w: kernel,
            pad_h: pad,
            pad_w: pad,
        }
    }

    /// Output height and width.
    ///
    /// # Errors
    /// As [`Conv2d::validate`].
    pub fn out_size(&self) -> Result<(usize, usize), KernelError> {
        let d = self.dims(0)?;
        Ok((d.oh, d.ow))
    }

    /// Elements of one input sample, `in_channels · in_h · in_w`.
    ///
    /// # Errors
    /// As [`Conv2d::validate`].
    pub fn in_len(&self) -> Result<usize, KernelError> {
        Ok(self.dims(0)?.x_sample)
    }

    /// Elements of one output sample, `out_channels · out_h · out_w`.
    ///
    /// # Errors
    /// As [`Conv2d::validate`].
    pub fn out_len(&self) -> Result<usize, KernelError> {
        Ok(self.dims(0)?.y_sample)
    }

    /// Number of weights, `out_channels · in_channels · kernel_h · kernel_w` (the bias
    /// has `out_channels` more).
    ///
    /// # Errors
    /// As [`Conv2d::validate`].
    pub fn weight_len(&self) -> Result<usize, KernelError> {
        Ok(self.dims(0)?.w_len)
    }

    /// Checks the descriptor.
    ///
    /// # Errors
    /// [`KernelError::ZeroDimension`] if a channel count, input size or kernel size is 0;
    /// [`KernelError::InvalidShape`] if the kernel is larger than the padded input;
    /// [`KernelError::ShapeOverflow`] if a size overflows `usize`.
    pub fn validate(&self) -> Result<(), KernelError> {
        self.dims(0).map(|_| ())
    }

    /// Validated sizes for a batch of `batch` samples.
    pub(crate) fn dims(&self, batch: usize) -> Result<ConvDims, KernelError> {
        positive("in_channels", self.in_channels)?;
        positive("out_channels", self.out_channels)?;
        positive("in_h", self.in_h)?;
        positive("in_w", self.in_w)?;
        positive("kernel_h", self.kernel_h)?;
        positive("kernel_w", self.kernel_w)?;
        let padded_h = self
            .pad_h
            .checked_mul(2)
            .and_then(|p| p.checked_add(self.in_h))
            .ok_or(KernelError::ShapeOverflow {
                what: "padded input",
            })?;
        let padded_w = self
            .pad_w
            .checked_mul(2)
            .and_then(|p| p.checked_add(self.in_w))
            .ok_or(KernelError::ShapeOverflow {
                what: "padded input",
            })?;
        if self.kernel_h > padded_h || self.kernel_w > padded_w {
            return Err(KernelError::InvalidShape {
                what: "conv2d",
                reason: "kernel larger than the padded input",
            });
        }
        let oh = padded_h - self.kernel_h + 1;
        let ow = padded_w - self.kernel_w + 1;
        let in_plane = mul("x", self.in_h, self.in_w)?;
        let out_plane = mul("y", oh, ow)?;
        let kk = mul("w", self.kernel_h, self.kernel_w)?;
        let ckk = mul("w", self.in_channels, kk)?;
        let w_len = mul("w", self.out_channels, ckk)?;
        let x_sample = mul("x", self.in_channels, in_plane)?;
        let y_sample = mul("y", self.out_channels, out_plane)?;
        // The lowered matrix of one sample (ckk × out_plane) must be addressable too.
        mul("im2col", ckk, out_plane)?;
        Ok(ConvDims {
            batch,
            c: self.in_channels,
            o: self.out_channels,
            h: self.in_h,
            w: self.in_w,
            kh: self.kernel_h,
            kw: self.kernel_w,
            ph: self.pad_h,
            pw: self.pad_w,
            oh,
            ow,
            in_plane,
            out_plane,
            ckk,
            w_len,
            x_sample,
            y_sample,
            x_len: mul("x", batch, x_sample)?,
            y_len: mul("y", batch, y_sample)?,
        })
    }
}

/// Every size of a validated convolution (all products checked).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConvDims {
    pub batch: usize,
    pub c: usize,
    pub o: usize,
    pub h: usize,
    pub w: usize,
    pub kh: usize,
    pub kw: usize,
    pub ph: usize,
    pub pw: usize,
    pub oh: usize,
    pub ow: usize,
    /// `h · w`
    pub in_plane: usize,
    /// `oh · ow`
    pub out_plane: usize,
    /// `c · kh · kw`, the rows of the lowered matrix.
    pub ckk: usize,
    /// `o · ckk`
    pub w_len: usize,
    /// `c · h · w`
    pub x_sample: usize,
    /// `o · oh · ow`
    pub y_sample: usize,
    pub x_len: usize,
    pub y_len: usize,
}

impl ConvDims {
    /// The lengths this layer's buffers must have.
    pub fn lens(&self) -> LayerLens {
        LayerLens {
            x: self.x_len,
            w: self.w_len,
            y: self.y_len,
            b: self.o,
        }
    }
}

/// 2×2 max pooling with stride 2 over `batch × channels × in_h × in_w` inputs.
///
/// The output is `batch × channels × (in_h / 2) × (in_w / 2)` (rounded down: an odd
/// last row or column is dropped, as in PyTorch's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2x2 {
    /// Channels (pooling is per channel).
    pub channels: usize,
    /// Input height, at least 2.
    pub in_h: usize,
    /// Input width, at least 2.
    pub in_w: usize,
}

impl MaxPool2x2 {
    /// Output height and width, `(in_h / 2, in_w / 2)`.
    ///
    /// # Errors
    /// As [`MaxPool2x2::validate`].
    pub fn out_size(&self) -> Result<(usize, usize), KernelError> {
        let d = self.dims(0)?;
        Ok((d.oh, d.ow))
    }

    /// Elements of one input sample.
    ///
    /// # Errors
    /// As [`MaxPool2x2::validate`].
    pub fn in_len(&self) -> Result<usize, KernelError> {
        Ok(self.dims(0)?.x_sample)
    }

    /// Elements of one output sample.
    ///
    /// # Errors
    /// As [`MaxPool2x2::validate`].
    pub fn out_len(&self) -> Result<usize, KernelError> {
        Ok(self.dims(0)?.y_sample)
    }

    /// Checks the descriptor.
    ///
    /// # Errors
    /// [`KernelError::ZeroDimension`] if `channels`, `in_h` or `in_w` is 0;
    /// [`KernelError::InvalidShape`] if `in_h` or `in_w` is 1;
    /// [`KernelError::ShapeOverflow`] if a size overflows `usize` or an input plane
    /// has more than `u32::MAX + 1` elements (argmax indices are `u32`).
    pub fn validate(&self) -> Result<(), KernelError> {
        self.dims(0).map(|_| ())
    }

    pub(crate) fn dims(&self, batch: usize) -> Result<PoolDims, KernelError> {
        positive("channels", self.channels)?;
        positive("in_h", self.in_h)?;
        positive("in_w", self.in_w)?;
        if self.in_h < 2 || self.in_w < 2 {
            return Err(KernelError::InvalidShape {
                what: "maxpool2x2",
                reason: "input smaller than the 2x2 window",
            });
        }
        let in_plane = mul("x", self.in_h, self.in_w)?;
        if u32::try_from(in_plane - 1).is_err() {
            return Err(KernelError::ShapeOverflow { what: "argmax" });
        }
        let (oh, ow) = (self.in_h / 2, self.in_w / 2);
        let x_sample = mul("x", self.channels, in_plane)?;
        let y_sample = mul("y", self.channels, oh * ow)?;
        Ok(PoolDims {
            planes: mul("x", batch, self.channels)?,
            w: self.in_w,
            oh,
            ow,
            in_plane,
            x_sample,
            y_sample,
            x_len: mul("x", batch, x_sample)?,
            y_len: mul("y", batch, y_sample)?,
        })
    }
}

/// Every size of a validated pooling layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolDims {
    /// `batch · channels`
    pub planes: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub in_plane: usize,
    pub x_sample: usize,
    pub y_sample: usize,
    pub x_len: usize,
    pub y_len: usize,
}

/// A dense (fully connected) layer `y = x·W + b`: input `batch × inputs`, weights
/// `inputs × outputs` row-major, bias `outputs`, output `batch × outputs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dense {
    /// Input features.
    pub inputs: usize,
    /// Output features.
    pub outputs: usize,
}

impl Dense {
    /// Number of weights, `inputs · outputs` (the bias has `outputs` more).
    ///
    /// # Errors
    /// As [`Dense::validate`].
    pub fn weight_len(&self) -> Result<usize, KernelError> {
        Ok(self.dims(0)?.w_len)
    }

    /// Checks the descriptor.
    ///
    /// # Errors
    /// [`KernelError::ZeroDimension`] if `inputs` or `outputs` is 0;
    /// [`KernelError::ShapeOverflow`] if the weight count overflows `usize`.
    pub fn validate(&self) -> Result<(), KernelError> {
        self.dims(0).map(|_| ())
    }

    pub(crate) fn dims(&self, batch: usize) -> Result<DenseDims, KernelError> {
        positive("inputs", self.inputs)?;
        positive("outputs", self.outputs)?;
        Ok(DenseDims {
            batch,
            i: self.inputs,
            o: self.outputs,
            w_len: mul("w", self.inputs, self.outputs)?,
            x_len: mul("x", batch, self.inputs)?,
            y_len: mul("y", batch, self.outputs)?,
        })
    }
}

/// Every size of a validated dense layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DenseDims {
    pub batch: usize,
    pub i: usize,
    pub o: usize,
    pub w_len: usize,
    pub x_len: usize,
    pub y_len: usize,
}

impl DenseDims {
    /// The lengths this layer's buffers must have.
    pub fn lens(&self) -> LayerLens {
        LayerLens {
            x: self.x_len,
            w: self.w_len,
            y: self.y_len,
            b: self.o,
        }
    }
}

/// The lengths a layer's buffers must have for one batch (convolution or dense), so every
/// implementation (fast, reference, CUDA) checks them the same way and names the same
/// buffer in its error.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerLens {
    /// The input (and its gradient).
    pub x: usize,
    /// The weights (and their gradient).
    pub w: usize,
    /// The output (and its gradient).
    pub y: usize,
    /// The bias (and its gradient).
    pub b: usize,
}

impl LayerLens {
    /// Checks a forward pass's input, weights and bias.
    pub fn check_x_w_b(&self, x: usize, w: usize, b: usize) -> Result<(), KernelError> {
        check_len("x", self.x, x)?;
        check_len("w", self.w, w)?;
        check_len("b", self.b, b)
    }

    /// Checks a backward pass's input, weights, output gradient and the gradients it writes
    /// (`dx` when one is asked for).
    pub fn check_backward(
        &self,
        [x, w, dy]: [usize; 3],
        dx: Option<usize>,
        [dw, db]: [usize; 2],
    ) -> Result<(), KernelError> {
        check_len("x", self.x, x)?;
        check_len("w", self.w, w)?;
        check_len("dy", self.y, dy)?;
        if let Some(dx) = dx {
            check_len("dx", self.x, dx)?;
        }
        check_len("dw", self.w, dw)?;
        check_len("db", self.b, db)
    }
}

fn positive(what: &'static str, value: usize) -> Result<(), KernelError> {
    if value == 0 {
        Err(KernelError::ZeroDimension { what })
    } else {
        Ok(())
    }
}

fn mul(what: &'static str, a: usize, b: usize) -> Result<usize, KernelError> {
    a.checked_mul(b).ok_or(KernelError::ShapeOverflow { what })
}
