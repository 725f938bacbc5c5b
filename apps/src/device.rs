//! Where an app's executors compute (`harp run APP --device cpu|cuda[:N]`): the parsed
//! option ([`Device`]) and the opened device ([`Compute`]).
//!
//! The CUDA path needs the `cuda` feature (on by default; the CUDA driver and NVRTC are
//! loaded at run time, so it builds on any machine). Opening `cuda` on a build without
//! it, or on a machine with no usable GPU, driver or NVRTC, is an [`AppError`] that says
//! which; nothing falls back to the CPU silently.

use harp::AppError;
use std::fmt;
use std::str::FromStr;

/// `--device`: the CPU (default) or CUDA device `ordinal`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    #[default]
    Cpu,
    Cuda {
        ordinal: usize,
    },
}

impl FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda { ordinal: 0 }),
            _ => {
                let ordinal = s
                    .strip_prefix("cuda:")
                    .and_then(|n| n.parse::<usize>().ok())
                    .ok_or_else(|| {
                        format!("unknown device '{s}': expected cpu, cuda or cuda:N (N a device number)")
                    })?;
                Ok(Device::Cuda { ordinal })
            }
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda { ordinal } => write!(f, "cuda:{ordinal}"),
        }
    }
}

/// An opened [`Device`], shared by every executor of the process.
#[derive(Clone, Debug, Default)]
pub enum Compute {
    #[default]
    Cpu,
    #[cfg(feature = "cuda")]
    Gpu(harp_kernels::cuda::Gpu),
}

impl Device {
    /// Opens the device. `Cpu` always succeeds; `Cuda` needs the `cuda` feature and a
    /// usable device, and fails with a message that says what is missing.
    pub fn open(self) -> Result<Compute, AppError> {
        match self {
            Device::Cpu => Ok(Compute::Cpu),
            Device::Cuda { ordinal } => open_cuda(ordinal),
        }
    }
}

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> Result<Compute, AppError> {
    let gpu = harp_kernels::cuda::Gpu::open(ordinal)
        .map_err(|e| -> AppError { format!("--device cuda:{ordinal}: {e}").into() })?;
    tracing::info!(
        device = gpu.name(),
        arch = gpu.arch(),
        "computing on the GPU"
    );
    Ok(Compute::Gpu(gpu))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(ordinal: usize) -> Result<Compute, AppError> {
    Err(format!(
        "--device cuda:{ordinal}: this harp was built without CUDA support; build it with \
         the `cuda` feature (on by default: `cargo build --release -p harp-apps`)"
    )
    .into())
}

impl Compute {
    /// Whether executors compute on a GPU.
    pub fn is_gpu(&self) -> bool {
        !matches!(self, Compute::Cpu)
    }

    /// Compiles (once per process) each kernel `(source, name)` on the GPU, so that a
    /// missing NVRTC or a kernel that does not compile is reported when the job starts,
    /// not by its first task. Nothing to do on the CPU.
    #[cfg(feature = "cuda")]
    pub fn prepare(
        &self,
        kernels: &[(&harp_kernels::cuda::CudaSource, &str)],
    ) -> Result<(), AppError> {
        if let Compute::Gpu(gpu) = self {
            for (source, name) in kernels {
                gpu.function(source, name)
                    .map_err(|e| -> AppError { format!("--device cuda: {e}").into() })?;
            }
        }
        Ok(())
    }
}

/// Device buffers an executor keeps between tasks (`Option` slots that grow on first use).
#[cfg(feature = "cuda")]
pub(crate) mod buffers {
    use harp_kernels::cuda::cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
    use harp_kernels::cuda::Gpu;
    use harp_kernels::KernelError;

    /// `slot` holding exactly `len` elements: reallocated (zeroed) only when its length
    /// differs; otherwise its contents are left for the kernel to overwrite.
    pub(crate) fn sized<'a, T: DeviceRepr + ValidAsZeroBits>(
        gpu: &Gpu,
        slot: &'a mut Option<CudaSlice<T>>,
        len: usize,
    ) -> Result<&'a mut CudaSlice<T>, KernelError> {
        if slot.as_ref().is_none_or(|dev| dev.len() != len) {
            *slot = Some(gpu.alloc_zeros(len)?);
        }
        slot.as_mut().ok_or_else(|| KernelError::Cuda {
            op: "allocation",
            message: "a device buffer is missing right after its allocation".into(),
        })
    }

    /// `slot` holding a copy of `host` (reallocated only when the length changes).
    pub(crate) fn uploaded<'a, T: DeviceRepr + ValidAsZeroBits>(
        gpu: &Gpu,
        slot: &'a mut Option<CudaSlice<T>>,
        host: &[T],
    ) -> Result<&'a mut CudaSlice<T>, KernelError> {
        let dev = sized(gpu, slot, host.len())?;
        gpu.upload_into(host, dev)?;
        Ok(dev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print_back() {
        assert_eq!("cpu".parse::<Device>(), Ok(Device::Cpu));
        assert_eq!("cuda".parse::<Device>(), Ok(Device::Cuda { ordinal: 0 }));
        assert_eq!("cuda:3".parse::<Device>(), Ok(Device::Cuda { ordinal: 3 }));
        assert_eq!(Device::Cuda { ordinal: 3 }.to_string(), "cuda:3");
        assert_eq!(Device::Cpu.to_string(), "cpu");
        for bad in ["tpu", "cuda:", "cuda:x", "cuda:-1", ""] {
            let error = bad.parse::<Device>().unwrap_err();
            assert!(
                error.contains("expected cpu, cuda or cuda:N"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn the_cpu_always_opens_and_is_not_a_gpu() {
        let compute = Device::Cpu.open().unwrap();
        assert!(!compute.is_gpu());
    }

    /// On a machine without a GPU (CI) `cuda` is refused with the reason, never a panic
    /// and never a silent CPU run. Skipped where a GPU is present.
    #[test]
    fn cuda_without_a_usable_gpu_is_refused_with_the_reason() {
        match (Device::Cuda { ordinal: 0 }).open() {
            Ok(compute) => {
                assert!(compute.is_gpu());
                eprintln!("skipped: a GPU is present, so cuda opens");
            }
            Err(e) => {
                let e = e.to_string();
                assert!(e.starts_with("--device cuda:0: "), "{e}");
                assert!(
                    e.contains("no CUDA device") || e.contains("without CUDA support"),
                    "{e}"
                );
            }
        }
        // An ordinal no machine has is refused even where a GPU is present.
        if cfg!(feature = "cuda") {
            let e = (Device::Cuda { ordinal: 4096 })
                .open()
                .unwrap_err()
                .to_string();
            assert!(e.contains("no CUDA device"), "{e}");
        }
    }
}
