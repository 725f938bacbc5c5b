//! The error type shared by every kernel in this crate.

use std::fmt;

/// Why a kernel refused its input. Kernels validate everything before writing any
/// output, so on error the output buffers are left untouched.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelError {
    /// A dimension that must be positive was zero (e.g. `features` or `classes`).
    ZeroDimension {
        /// Name of the dimension.
        what: &'static str,
    },
    /// A product of dimensions does not fit in `usize`.
    ShapeOverflow {
        /// Name of the buffer whose size overflowed.
        what: &'static str,
    },
    /// A slice does not have the length the shape requires.
    LengthMismatch {
        /// Name of the offending argument.
        what: &'static str,
        /// Length required by the shape (or by the other arguments).
        expected: usize,
        /// Length actually passed.
        actual: usize,
    },
    /// A label is not a valid class index.
    LabelOutOfRange {
        /// Row (0-based, within the batch) holding the label.
        row: usize,
        /// The label found there.
        label: u32,
        /// Number of classes; valid labels are `0..classes`.
        classes: usize,
    },
    /// Adam was called with step count 0; steps are 1-based.
    ZeroStep,
    /// An optimizer hyperparameter is outside its valid range.
    InvalidHyperparameter {
        /// Name of the hyperparameter.
        what: &'static str,
        /// The rejected value.
        value: f32,
    },
    /// A layer's dimensions are inconsistent with each other (e.g. a convolution
    /// kernel larger than its padded input).
    InvalidShape {
        /// Name of the offending layer or dimension.
        what: &'static str,
        /// Why the shape is refused.
        reason: &'static str,
    },
    /// An index passed in a buffer (e.g. a max-pooling argmax) does not point where
    /// it must.
    IndexOutOfRange {
        /// Name of the buffer holding the index.
        what: &'static str,
        /// Position of the bad index within that buffer.
        position: usize,
        /// The index found there.
        index: u64,
    },
    /// An input value is invalid where it stands (e.g. a non-finite rating or factor,
    /// a uniform random number outside `[0, 1)`).
    InvalidValue {
        /// Name of the buffer holding the value.
        what: &'static str,
        /// Position of the bad value within that buffer.
        position: usize,
    },
    /// LDA counts do not contain the assignment of the token at `position` (a count it
    /// must be removed from is already 0).
    InconsistentCounts {
        /// Position of the token in the token slices.
        position: usize,
    },
    /// A linear system that must be symmetric positive definite failed its Cholesky
    /// factorization (overflow in the inputs).
    NotPositiveDefinite {
        /// Row whose system failed.
        row: usize,
    },
    /// No usable CUDA device: the driver library (libcuda) could not be loaded, the
    /// driver failed to initialize, or there is no device with the requested ordinal.
    /// Only returned by the CUDA path (feature `cuda`).
    GpuUnavailable {
        /// What went wrong, for people.
        reason: String,
    },
    /// The NVRTC runtime compiler library (libnvrtc) could not be loaded, so CUDA
    /// sources cannot be compiled. Only returned by the CUDA path (feature `cuda`).
    NvrtcUnavailable {
        /// What went wrong, for people (includes the library names tried).
        reason: String,
    },
    /// NVRTC rejected a CUDA source. Only returned by the CUDA path (feature `cuda`).
    CudaCompile {
        /// Name of the source (`CudaSource::name`).
        source_name: &'static str,
        /// NVRTC's result code and compile log.
        log: String,
    },
    /// A CUDA driver call failed (allocation, copy, module load, launch, ...). Only
    /// returned by the CUDA path (feature `cuda`).
    Cuda {
        /// The operation that failed.
        op: &'static str,
        /// The driver's error.
        message: String,
    },
    /// An input is too large for a CUDA kernel's launch geometry or index types.
    /// Only returned by the CUDA path (feature `cuda`).
    GpuLimit {
        /// Name of the offending dimension.
        what: &'static str,
        /// The value passed.
        value: usize,
        /// The largest value the kernel supports.
        max: usize,
    },
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::ZeroDimension { what } => write!(f, "dimension `{what}` must be positive"),
            KernelError::ShapeOverflow { what } => {
                write!(f, "size of `{what}` overflows usize")
            }
            KernelError::LengthMismatch {
                what,
                expected,
                actual,
            } => write!(f, "`{what}` has length {actual}, expected {expected}"),
            KernelError::LabelOutOfRange {
                row,
                label,
                classes,
            } => write!(
                f,
                "label {label} at row {row} is out of range (classes = {classes})"
            ),
            KernelError::ZeroStep => write!(f, "Adam step count must be >= 1 (it is 1-based)"),
            KernelError::InvalidHyperparameter { what, value } => {
                write!(f, "invalid hyperparameter `{what}` = {value}")
            }
            KernelError::InvalidShape { what, reason } => {
                write!(f, "invalid shape for `{what}`: {reason}")
            }
            KernelError::IndexOutOfRange {
                what,
                position,
                index,
            } => write!(f, "`{what}[{position}]` = {index} is out of range"),
            KernelError::InvalidValue { what, position } => {
                write!(f, "`{what}[{position}]` is not a valid value")
            }
            KernelError::InconsistentCounts { position } => write!(
                f,
                "the counts do not contain the assignment of token {position}"
            ),
            KernelError::NotPositiveDefinite { row } => {
                write!(f, "the system of row {row} is not positive definite")
            }
            KernelError::GpuUnavailable { reason } => write!(f, "no CUDA device: {reason}"),
            KernelError::NvrtcUnavailable { reason } => write!(f, "NVRTC unavailable: {reason}"),
            KernelError::CudaCompile { source_name, log } => {
                write!(f, "NVRTC failed to compile `{source_name}`: {log}")
            }
            KernelError::Cuda { op, message } => write!(f, "CUDA {op} failed: {message}"),
            KernelError::GpuLimit { what, value, max } => write!(
                f,
                "`{what}` = {value} exceeds the CUDA kernel's limit of {max}"
            ),
        }
    }
}

impl std::error::Error for KernelError {}

/// Returns `Ok(())` when `actual == expected`, otherwise a [`KernelError::LengthMismatch`].
pub(crate) fn check_len(
    what: &'static str,
    expected: usize,
    actual: usize,
) -> Result<(), KernelError> {
    if actual == expected {
        Ok(())
    } else {
        Err(KernelError::LengthMismatch {
            what,
            expected,
            actual,
        })
    }
}
