//! [`Gpu`]: an open CUDA device with one stream and a cache of compiled kernels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, DeviceRepr, LaunchConfig,
    ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use super::nvrtc::{compile_cubin, guard};
use super::{driver_err, CudaSource};
use crate::error::KernelError;

/// Threads per block of the element-wise (grid-stride) kernels.
pub const BLOCK_THREADS: u32 = 256;
/// Blocks per SM launched for grid-stride kernels: 8 × 256 = 2048 threads, the most
/// one SM of a Volta..Hopper GPU keeps resident, so one launch is one full wave.
const BLOCKS_PER_SM: u32 = 8;

/// Compiled modules and loaded functions. Keyed by the source's name, and each entry
/// keeps the code it was compiled from: a hit also needs equal code, so two different
/// sources that share a name never share a module. (The code is compared rather than
/// its address because a `const` `CudaSource` may point at different copies of the same
/// string in different codegen units.)
#[derive(Default)]
struct Cache {
    modules: HashMap<&'static str, Vec<(&'static str, Arc<CudaModule>)>>,
    functions: HashMap<(&'static str, String), Vec<(&'static str, CudaFunction)>>,
}

/// The value stored for `code` among entries that share a name.
fn find<'a, T>(entries: Option<&'a Vec<(&'static str, T)>>, code: &str) -> Option<&'a T> {
    entries?
        .iter()
        .find(|(stored, _)| *stored == code)
        .map(|(_, value)| value)
}

struct Inner {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    arch: String,
    sm_count: u32,
    cache: Mutex<Cache>,
}

/// An open CUDA device: its (primary) context, one non-blocking stream every kernel
/// wrapper of this crate launches on, and the modules compiled so far.
///
/// Cheap to clone (all clones share the stream and the cache) and `Send + Sync`.
/// Device buffers passed to the kernel wrappers must belong to this device.
#[derive(Clone)]
pub struct Gpu {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.inner.ctx.ordinal())
            .field("name", &self.inner.name)
            .field("arch", &self.inner.arch)
            .field("sm_count", &self.inner.sm_count)
            .finish()
    }
}

fn unavailable(reason: impl Into<String>) -> KernelError {
    KernelError::GpuUnavailable {
        reason: reason.into(),
    }
}

impl Gpu {
    /// Opens device `ordinal`: loads the CUDA driver library, initializes it, retains
    /// the device's primary context and creates a stream.
    ///
    /// # Errors
    /// [`KernelError::GpuUnavailable`] if libcuda cannot be loaded, the driver fails to
    /// initialize (e.g. no device), `ordinal` is out of range, or the context or
    /// stream cannot be created. Never panics.
    pub fn open(ordinal: usize) -> Result<Gpu, KernelError> {
        // SAFETY: only tries to dlopen the candidate library names and drops them.
        let present = guard(|| unsafe { cudarc::driver::sys::is_culib_present() }).unwrap_or(false);
        if !present {
            return Err(unavailable(
                "the CUDA driver library (libcuda.so.1) could not be loaded",
            ));
        }
        guard(|| Self::open_loaded(ordinal))
            .map_err(|panic| unavailable(format!("CUDA driver: {panic}")))?
    }

    fn open_loaded(ordinal: usize) -> Result<Gpu, KernelError> {
        let count = CudaContext::device_count()
            .map_err(|e| unavailable(format!("CUDA driver initialization failed: {e}")))?;
        let count = usize::try_from(count).unwrap_or(0);
        if ordinal >= count {
            return Err(unavailable(format!(
                "no device with ordinal {ordinal} ({count} CUDA device(s) present)"
            )));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| unavailable(format!("creating a context on device {ordinal}: {e}")))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| unavailable(format!("reading the compute capability: {e}")))?;
        let sm_count = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| unavailable(format!("reading the SM count: {e}")))?;
        let name = ctx
            .name()
            .unwrap_or_else(|_| format!("CUDA device {ordinal}"));
        let stream = ctx
            .new_stream()
            .map_err(|e| unavailable(format!("creating a stream: {e}")))?;
        Ok(Gpu {
            inner: Arc::new(Inner {
                ctx,
                stream,
                name,
                arch: format!("sm_{major}{minor}"),
                sm_count: u32::try_from(sm_count).unwrap_or(1).max(1),
                cache: Mutex::new(Cache::default()),
            }),
        })
    }

    /// The kernel `name` (an `extern "C" __global__` function) of `src`, compiled for
    /// this device. Each source is compiled with NVRTC (to a cubin for [`Gpu::arch`])
    /// and loaded once per `Gpu` (clones share the cache); later calls are map lookups.
    ///
    /// # Errors
    /// [`KernelError::NvrtcUnavailable`] if libnvrtc cannot be loaded;
    /// [`KernelError::CudaCompile`] if the source does not compile;
    /// [`KernelError::Cuda`] if the module cannot be loaded or has no kernel `name`.
    pub fn function(&self, src: &CudaSource, name: &str) -> Result<CudaFunction, KernelError> {
        let fn_key = (src.name, name.to_string());
        // A poisoned lock only means another thread panicked while holding it; the
        // maps are always left consistent, so keep using them.
        let mut cache = self
            .inner
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(f) = find(cache.functions.get(&fn_key), src.code) {
            return Ok(f.clone());
        }
        let module = match find(cache.modules.get(src.name), src.code) {
            Some(module) => module.clone(),
            None => {
                let cubin = compile_cubin(src, &self.inner.arch)?;
                let ctx = &self.inner.ctx;
                let module = guard(|| ctx.load_module(Ptx::from_binary(cubin)))
                    .map_err(|panic| KernelError::Cuda {
                        op: "module load",
                        message: panic,
                    })?
                    .map_err(driver_err("module load"))?;
                cache
                    .modules
                    .entry(src.name)
                    .or_default()
                    .push((src.code, module.clone()));
                module
            }
        };
        if name.contains('\0') {
            return Err(KernelError::Cuda {
                op: "function lookup",
                message: format!("kernel name {name:?} contains a NUL byte"),
            });
        }
        // Module calls act on the calling thread's current context: make it ours.
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(driver_err("bind context"))?;
        let function = module.load_function(name).map_err(|e| KernelError::Cuda {
            op: "function lookup",
            message: format!("`{name}` in {}: {e}", src.name),
        })?;
        cache
            .functions
            .entry(fn_key)
            .or_default()
            .push((src.code, function.clone()));
        Ok(function)
    }

    /// The stream every kernel wrapper of this crate launches on. Work on it runs in
    /// order, so a download issued after a kernel sees its result.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    /// The device's context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// The device's name, e.g. `"NVIDIA H100 80GB HBM3"`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The architecture sources are compiled for, from the compute capability: `"sm_90"`.
    pub fn arch(&self) -> &str {
        &self.inner.arch
    }

    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.inner.sm_count
    }

    /// Launch geometry for a grid-stride kernel over `work_items` independent items
    /// (for the float4 kernels: `ceil(n / 4)`): `BLOCK_THREADS` threads per block,
    /// as many blocks as the items need but at most one full wave of the device, and
    /// at least one block.
    pub fn grid_stride_config(&self, work_items: usize) -> LaunchConfig {
        let needed = work_items.div_ceil(BLOCK_THREADS as usize);
        let wave = self.inner.sm_count.saturating_mul(BLOCKS_PER_SM) as usize;
        let blocks = needed.clamp(1, wave.max(1));
        LaunchConfig {
            grid_dim: (u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Copies `host` into a new device buffer (asynchronously on [`Gpu::stream`]).
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the allocation or copy fails.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>, KernelError> {
        self.inner
            .stream
            .clone_htod(host)
            .map_err(driver_err("upload"))
    }

    /// Overwrites `dev` with `host` (asynchronously on [`Gpu::stream`]).
    ///
    /// # Errors
    /// [`KernelError::LengthMismatch`] if the lengths differ;
    /// [`KernelError::Cuda`] if the copy fails.
    pub fn upload_into<T: DeviceRepr>(
        &self,
        host: &[T],
        dev: &mut CudaSlice<T>,
    ) -> Result<(), KernelError> {
        crate::error::check_len("host", dev.len(), host.len())?;
        self.inner
            .stream
            .memcpy_htod(host, dev)
            .map_err(driver_err("upload"))
    }

    /// Copies `dev` back to the host; waits for all work queued on the stream before it.
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the copy fails (including errors of earlier kernels,
    /// which CUDA reports here).
    pub fn download<T: DeviceRepr>(&self, dev: &CudaSlice<T>) -> Result<Vec<T>, KernelError> {
        self.inner
            .stream
            .clone_dtoh(dev)
            .map_err(driver_err("download"))
    }

    /// A new zero-filled device buffer of `len` elements.
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the allocation fails.
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>, KernelError> {
        self.inner
            .stream
            .alloc_zeros(len)
            .map_err(driver_err("allocation"))
    }

    /// Waits until everything queued on [`Gpu::stream`] has finished.
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the stream reports an error (e.g. from a kernel).
    pub fn synchronize(&self) -> Result<(), KernelError> {
        self.inner
            .stream
            .synchronize()
            .map_err(driver_err("synchronize"))
    }
}
