//! Parameter-server update rules, applied server-side to rows of `f32` parameters.
//!
//! This module owns the hyperparameter types ([`AdaGrad`], [`Adam`]) and their
//! validation. The fast rules live in `rules` (plain slice zips written so the
//! compiler auto-vectorizes them); [`reference`](mod@reference) holds f64 versions for the tests.
//! Every function checks that all slices have the same length and writes nothing
//! on error.

mod rules;

pub mod reference;

pub use rules::{adagrad_step, adam_step, add_assign, axpy};

use crate::error::{check_len, KernelError};

/// AdaGrad hyperparameters: `accum += g²; w -= lr * g / (sqrt(accum) + eps)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaGrad {
    /// Learning rate.
    pub lr: f32,
    /// Added to the denominator to avoid division by zero.
    pub eps: f32,
}

impl Default for AdaGrad {
    /// `lr = 0.1`, `eps = 1e-8`.
    fn default() -> Self {
        Self { lr: 0.1, eps: 1e-8 }
    }
}

impl AdaGrad {
    /// Checks that `lr` is finite and `eps` is finite and non-negative.
    ///
    /// # Errors
    /// [`KernelError::InvalidHyperparameter`] naming the first bad field.
    pub fn validate(&self) -> Result<(), KernelError> {
        finite("lr", self.lr)?;
        non_negative("eps", self.eps)
    }

    /// What every AdaGrad step (CPU, reference, CUDA) checks before it writes: the
    /// hyperparameters, then that `accum` and `grad` are as long as the weights `w`.
    pub(crate) fn check_step(&self, [w, accum, grad]: [usize; 3]) -> Result<(), KernelError> {
        self.validate()?;
        check_len("accum", w, accum)?;
        check_len("grad", w, grad)
    }
}

/// Adam hyperparameters (Kingma & Ba), with bias correction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adam {
    /// Learning rate.
    pub lr: f32,
    /// Decay of the first-moment (mean) estimate, in `[0, 1)`.
    pub beta1: f32,
    /// Decay of the second-moment (uncentered variance) estimate, in `[0, 1)`.
    pub beta2: f32,
    /// Added to the denominator to avoid division by zero.
    pub eps: f32,
}

impl Default for Adam {
    /// `lr = 1e-3`, `beta1 = 0.9`, `beta2 = 0.999`, `eps = 1e-8`.
    fn default() -> Self {
        Self {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

impl Adam {
    /// Checks that `lr` is finite, `eps` is finite and non-negative, and both betas
    /// lie in `[0, 1)` (a beta of 1 makes the bias correction divide by zero).
    ///
    /// # Errors
    /// [`KernelError::InvalidHyperparameter`] naming the first bad field.
    pub fn validate(&self) -> Result<(), KernelError> {
        finite("lr", self.lr)?;
        non_negative("eps", self.eps)?;
        unit_interval("beta1", self.beta1)?;
        unit_interval("beta2", self.beta2)
    }

    /// What every Adam step (CPU, reference, CUDA) checks before it writes: a step count of
    /// at least 1, the hyperparameters, then that `m`, `v` and `grad` are as long as the
    /// weights `w`.
    pub(crate) fn check_step(
        &self,
        step: u64,
        [w, m, v, grad]: [usize; 4],
    ) -> Result<(), KernelError> {
        if step == 0 {
            return Err(KernelError::ZeroStep);
        }
        self.validate()?;
        check_len("m", w, m)?;
        check_len("v", w, v)?;
        check_len("grad", w, grad)
    }
}

fn finite(what: &'static str, value: f32) -> Result<(), KernelError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(KernelError::InvalidHyperparameter { what, value })
    }
}

fn non_negative(what: &'static str, value: f32) -> Result<(), KernelError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(KernelError::InvalidHyperparameter { what, value })
    }
}

fn unit_interval(what: &'static str, value: f32) -> Result<(), KernelError> {
    if (0.0..1.0).contains(&value) {
        Ok(())
    } else {
        Err(KernelError::InvalidHyperparameter { what, value })
    }
}
