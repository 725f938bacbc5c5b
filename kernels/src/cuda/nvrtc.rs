//! Run-time compilation of [`CudaSource`]s with NVRTC.
//!
//! cudarc loads `libnvrtc` lazily and panics if it is missing, so every entry point
//! here first checks (once per process) that the library loads and answers
//! `nvrtcVersion`, and turns a failure into [`KernelError::NvrtcUnavailable`]. Calls
//! into cudarc run under `catch_unwind` as a second line of defence, so a missing
//! symbol in an unexpected library version is reported rather than unwinding through
//! the caller.

use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use cudarc::nvrtc::{result, sys};

use super::CudaSource;
use crate::error::KernelError;

/// Architectures [`compile_check`] compiles every source for (A100 and H100).
pub const CHECK_ARCHS: &[&str] = &["sm_80", "sm_90"];

/// Runs `f`, turning a panic (from cudarc's lazy library loading) into `Err(message)`.
pub(crate) fn guard<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "panic inside cudarc".to_string()
        }
    })
}

/// Checks once per process that libnvrtc loads; returns NVRTC's (major, minor) version.
fn loaded() -> Result<(i32, i32), KernelError> {
    static STATE: OnceLock<Result<(i32, i32), String>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the candidate library names and drops them.
            let present = guard(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
            if !present {
                let tried = guard(|| cudarc::get_lib_name_candidates("nvrtc"))
                    .map(|names| names.join(", "))
                    .unwrap_or_default();
                return Err(format!(
                    "libnvrtc could not be loaded (tried: {tried}); put the directory holding \
                     libnvrtc.so.13 or libnvrtc.so.12 on LD_LIBRARY_PATH \
                     (scripts/install-test-deps.sh installs one under target/nvrtc)"
                ));
            }
            let (mut major, mut minor) = (0, 0);
            // SAFETY: both pointers are valid for writes for the duration of the call.
            let status = guard(|| unsafe { sys::nvrtcVersion(&mut major, &mut minor).result() })?;
            status.map_err(|e| format!("nvrtcVersion failed: {e}"))?;
            Ok((major, minor))
        })
        .clone()
        .map_err(|reason| KernelError::NvrtcUnavailable { reason })
}

/// The version of the NVRTC library that was loaded, as (major, minor).
///
/// # Errors
/// [`KernelError::NvrtcUnavailable`] if libnvrtc cannot be loaded.
pub fn nvrtc_version() -> Result<(i32, i32), KernelError> {
    loaded()
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: self.0 came from nvrtcCreateProgram and is destroyed only here.
        // Nothing useful can be done if destroying fails, so the result is ignored.
        let _ = guard(|| unsafe { result::destroy_program(self.0) });
    }
}

/// Compiles `src` for the real architecture `arch` (e.g. `"sm_90"`) and returns the
/// cubin, ready for `cuModuleLoadData`.
///
/// # Errors
/// [`KernelError::NvrtcUnavailable`] if libnvrtc cannot be loaded;
/// [`KernelError::CudaCompile`] (with NVRTC's log) if the source does not compile or
/// `arch` is not one NVRTC knows.
pub fn compile_cubin(src: &CudaSource, arch: &str) -> Result<Vec<u8>, KernelError> {
    loaded()?;
    let fail = |log: String| KernelError::CudaCompile {
        source_name: src.name,
        log,
    };
    let code = CString::new(src.code).map_err(|_| fail("source contains a NUL byte".into()))?;
    let name = CString::new(src.name).map_err(|_| fail("name contains a NUL byte".into()))?;
    let options = [format!("--gpu-architecture={arch}")];
    if options[0].contains('\0') {
        return Err(fail(format!("architecture {arch:?} contains a NUL byte")));
    }

    let cubin = guard(|| -> Result<Vec<u8>, String> {
        let prog = Program(
            result::create_program(&code, Some(&name))
                .map_err(|e| format!("nvrtcCreateProgram: {e}"))?,
        );
        // SAFETY: prog.0 is a live program; the options contain no NUL bytes (checked).
        if let Err(e) = unsafe { result::compile_program(prog.0, &options) } {
            return Err(format!("{e} ({}):\n{}", options[0], program_log(&prog)));
        }
        let mut size = 0usize;
        // SAFETY: prog.0 is a live, compiled program; `size` is valid for writes.
        unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }
            .result()
            .map_err(|e| format!("nvrtcGetCUBINSize: {e}"))?;
        let mut cubin = vec![0u8; size];
        // SAFETY: `cubin` has exactly the size NVRTC reported for this program's cubin.
        unsafe { sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast::<c_char>()) }
            .result()
            .map_err(|e| format!("nvrtcGetCUBIN: {e}"))?;
        if cubin.is_empty() {
            return Err(format!("NVRTC produced no cubin for {arch}"));
        }
        Ok(cubin)
    });
    match cubin {
        Ok(Ok(cubin)) => Ok(cubin),
        Ok(Err(log)) => Err(fail(log)),
        Err(panic) => Err(KernelError::NvrtcUnavailable { reason: panic }),
    }
}

/// NVRTC's log for `prog`, or a note saying why it could not be read.
fn program_log(prog: &Program) -> String {
    // SAFETY: prog.0 is a live program.
    match unsafe { result::get_program_log(prog.0) } {
        Ok(raw) => {
            let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
            match CStr::from_bytes_until_nul(&bytes) {
                Ok(log) => log.to_string_lossy().into_owned(),
                Err(_) => String::from_utf8_lossy(&bytes).into_owned(),
            }
        }
        Err(e) => format!("(no log: {e})"),
    }
}

/// Compiles `src` with NVRTC for every architecture in [`CHECK_ARCHS`]; needs no GPU.
///
/// # Errors
/// [`KernelError::NvrtcUnavailable`] if libnvrtc cannot be loaded;
/// [`KernelError::CudaCompile`] with NVRTC's log if the source does not compile.
pub fn compile_check(src: &CudaSource) -> Result<(), KernelError> {
    for arch in CHECK_ARCHS {
        compile_cubin(src, arch)?;
    }
    Ok(())
}
