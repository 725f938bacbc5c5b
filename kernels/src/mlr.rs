//! Multinomial logistic regression (softmax regression) minibatch kernels.
//!
//! This module owns the shape type, the reusable scratch buffers and the input
//! validation shared by the fast path ([`gradient`], [`evaluate`]) and the plain
//! reference ([`gradient_reference`]).
//!
//! Layout conventions (all row-major):
//! * `x`: `rows × features`, where `rows = labels.len()`;
//! * `w` and `grad`: `features × classes`;
//! * `labels[i]` is the class of row `i`, in `0..classes`.
//!
//! Losses and gradients are **sums** over the batch, not means; the caller scales.

mod blocked;
mod fast;
mod reference;
mod softmax;

pub use blocked::{gradient_blocked, GATHER_BELOW_BLOCK_FEATURES};
pub use fast::{evaluate, gradient, gradient_scaled};
pub use reference::gradient_reference;

use crate::error::{check_len, KernelError};

/// Dimensions of an MLR model: `features` inputs, `classes` outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlrShape {
    /// Number of input features (columns of `x`, rows of `w`).
    pub features: usize,
    /// Number of classes (columns of `w`).
    pub classes: usize,
}

impl MlrShape {
    /// Number of parameters, `features * classes` (the length of `w` and `grad`).
    ///
    /// # Errors
    /// [`KernelError::ShapeOverflow`] if the product overflows.
    pub fn params(&self) -> Result<usize, KernelError> {
        self.features
            .checked_mul(self.classes)
            .ok_or(KernelError::ShapeOverflow { what: "w" })
    }
}

/// Reusable buffers so the hot loop does not allocate.
///
/// Holds the `rows × classes` logits / probabilities matrix. It only grows: once it
/// has seen the largest batch, [`gradient`] and [`evaluate`] allocate nothing
/// themselves (the GEMM routine still uses its own small packing buffer).
#[derive(Clone, Debug, Default)]
pub struct MlrScratch {
    logits: Vec<f32>,
    /// The weights and gradient assembled from narrow blocks ([`gradient_blocked`]).
    assembled: Vec<f32>,
    assembled_grad: Vec<f32>,
}

impl MlrScratch {
    /// Empty scratch; it grows on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// Scratch pre-sized for batches of up to `rows` rows of `classes` classes.
    pub fn with_capacity(rows: usize, classes: usize) -> Self {
        let mut scratch = Self::default();
        scratch.logits.resize(rows.saturating_mul(classes), 0.0);
        scratch
    }

    /// A `len`-element view of the logits buffer, growing it if needed. Contents are
    /// unspecified (left over from earlier calls).
    pub(crate) fn logits(&mut self, len: usize) -> &mut [f32] {
        if self.logits.len() < len {
            self.logits.resize(len, 0.0);
        }
        &mut self.logits[..len]
    }
}

/// Validates the inputs shared by every MLR kernel and returns the batch size
/// (`labels.len()`). Every label is checked here, so callers may index with labels.
pub(crate) fn validate(
    shape: MlrShape,
    x: &[f32],
    labels: &[u32],
    w: &[f32],
) -> Result<usize, KernelError> {
    if shape.features == 0 {
        return Err(KernelError::ZeroDimension { what: "features" });
    }
    if shape.classes == 0 {
        return Err(KernelError::ZeroDimension { what: "classes" });
    }
    check_len("w", shape.params()?, w.len())?;
    validate_batch(shape, x, labels)
}

/// Validates the shape, `x` and the labels (not the weights) and returns the batch size.
pub(crate) fn validate_batch(
    shape: MlrShape,
    x: &[f32],
    labels: &[u32],
) -> Result<usize, KernelError> {
    if shape.features == 0 {
        return Err(KernelError::ZeroDimension { what: "features" });
    }
    if shape.classes == 0 {
        return Err(KernelError::ZeroDimension { what: "classes" });
    }
    let rows = labels.len();
    let x_len = rows
        .checked_mul(shape.features)
        .ok_or(KernelError::ShapeOverflow { what: "x" })?;
    check_len("x", x_len, x.len())?;
    if let Some((row, &label)) = labels
        .iter()
        .enumerate()
        .find(|&(_, &label)| label as usize >= shape.classes)
    {
        return Err(KernelError::LabelOutOfRange {
            row,
            label,
            classes: shape.classes,
        });
    }
    Ok(rows)
}
