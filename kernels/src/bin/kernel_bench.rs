//! `harp-kernel-bench`: how close harp's bandwidth-bound CUDA kernels come to the
//! device's copy bandwidth.
//!
//! First measures device-to-device `memcpy` of a 256 MiB+ buffer (bytes read + bytes
//! written per iteration), then each kernel in [`CASES`] on `--elements` elements
//! (default 64 Mi), with warm-up launches and `--reps` timed repetitions between two
//! CUDA events. Prints one JSON line per measurement on stdout:
//!
//! `{"kernel":"adam","elements":67108864,"bytes_per_iter":1879048192,"gbps":..,"copy_gbps":..,"ratio":..,"ms_per_iter":..}`
//!
//! `bytes_per_iter` counts every array element each iteration must read or write once
//! (e.g. Adam reads w, m, v, g and writes w, m, v: 28 bytes per element). Without a
//! CUDA device it prints why on stderr and exits 0 (1 if `HARP_REQUIRE_GPU=1`). Needs the
//! `cuda` feature.

use std::process::ExitCode;

use clap::Parser;
use harp_kernels::cuda::cudarc::driver::sys::CUevent_flags;
use harp_kernels::cuda::cudarc::driver::CudaSlice;
use harp_kernels::cuda::{optim, Gpu};
use harp_kernels::{AdaGrad, Adam, KernelError};

#[derive(Parser, Debug)]
#[command(
    name = "harp-kernel-bench",
    about = "Bandwidth of harp's CUDA kernels against device copy bandwidth (one JSON line each)"
)]
struct Args {
    /// Elements (f32) per array for the kernels.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    elements: usize,
    /// Timed repetitions per measurement.
    #[arg(long, default_value_t = 20)]
    reps: u32,
    /// Untimed warm-up repetitions per measurement (the first also compiles the kernel).
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// Only run these kernels (repeatable); the copy baseline always runs.
    #[arg(long = "kernel")]
    kernels: Vec<String>,
}

/// One timed kernel: elements per array, bytes moved per iteration, milliseconds per iteration.
struct Measured {
    elements: usize,
    bytes_per_iter: u64,
    ms_per_iter: f64,
}

type CaseFn = fn(&Gpu, &Args) -> Result<Measured, KernelError>;

/// The bandwidth-bound kernels measured, by name. Add new kernels here (K2: LDA
/// sampling and MF updates): a function that allocates its buffers, states its bytes
/// per iteration, and times the launch with [`time_per_iter`].
const CASES: &[(&str, CaseFn)] = &[
    ("add_assign", bench_add_assign),
    ("axpy", bench_axpy),
    ("adagrad", bench_adagrad),
    ("adam", bench_adam),
];

/// Smallest copy buffer: 256 MiB of f32.
const MIN_COPY_ELEMENTS: usize = 64 * 1024 * 1024;

fn main() -> ExitCode {
    let args = Args::parse();
    if args.elements == 0 {
        eprintln!("harp-kernel-bench: --elements must be positive");
        return ExitCode::FAILURE;
    }
    let unknown: Vec<&String> = args
        .kernels
        .iter()
        .filter(|k| !CASES.iter().any(|(name, _)| name == k))
        .collect();
    if !unknown.is_empty() {
        let known: Vec<&str> = CASES.iter().map(|(name, _)| *name).collect();
        eprintln!("harp-kernel-bench: unknown kernel(s) {unknown:?}; known: {known:?}");
        return ExitCode::FAILURE;
    }
    let gpu = match Gpu::open(args.device) {
        Ok(gpu) => gpu,
        Err(e) => {
            eprintln!("harp-kernel-bench: skipped, {e}; nothing measured");
            // gpu-bundle/run.sh sets HARP_REQUIRE_GPU=1: there a missing device is an error.
            return if std::env::var("HARP_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    eprintln!(
        "harp-kernel-bench: {} ({}, {} SMs), {} elements, {} warm-up + {} timed reps",
        gpu.name(),
        gpu.arch(),
        gpu.sm_count(),
        args.elements,
        args.warmup,
        args.reps
    );
    match run(&gpu, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("harp-kernel-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(gpu: &Gpu, args: &Args) -> Result<(), KernelError> {
    let copy = bench_copy(gpu, args)?;
    let copy_gbps = gbps(&copy);
    report("copy", &copy, copy_gbps);
    for (name, case) in CASES {
        if args.kernels.is_empty() || args.kernels.iter().any(|k| k == name) {
            let measured = case(gpu, args)?;
            report(name, &measured, copy_gbps);
        }
    }
    Ok(())
}

fn gbps(m: &Measured) -> f64 {
    m.bytes_per_iter as f64 / (m.ms_per_iter * 1e-3) / 1e9
}

fn report(kernel: &str, m: &Measured, copy_gbps: f64) {
    let gbps = gbps(m);
    println!(
        "{}",
        serde_json::json!({
            "kernel": kernel,
            "elements": m.elements,
            "bytes_per_iter": m.bytes_per_iter,
            "gbps": gbps,
            "copy_gbps": copy_gbps,
            "ratio": gbps / copy_gbps,
            "ms_per_iter": m.ms_per_iter,
        })
    );
}

fn cuda_err(
    op: &'static str,
) -> impl FnOnce(harp_kernels::cuda::cudarc::driver::DriverError) -> KernelError {
    move |e| KernelError::Cuda {
        op,
        message: e.to_string(),
    }
}

/// Runs `step` `warmup` times untimed, then `reps` times between two CUDA events on
/// the GPU's stream; returns milliseconds per repetition.
fn time_per_iter(
    gpu: &Gpu,
    args: &Args,
    mut step: impl FnMut() -> Result<(), KernelError>,
) -> Result<f64, KernelError> {
    for _ in 0..args.warmup {
        step()?;
    }
    gpu.synchronize()?;
    let reps = args.reps.max(1);
    let stream = gpu.stream();
    let start = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("event record"))?;
    for _ in 0..reps {
        step()?;
    }
    let end = stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_err("event record"))?;
    end.synchronize().map_err(cuda_err("event synchronize"))?;
    let ms = start.elapsed_ms(&end).map_err(cuda_err("event elapsed"))?;
    Ok(f64::from(ms) / f64::from(reps))
}

fn filled(gpu: &Gpu, n: usize, value: f32) -> Result<CudaSlice<f32>, KernelError> {
    gpu.upload(&vec![value; n])
}

fn measured(elements: usize, arrays_touched: u64, ms_per_iter: f64) -> Measured {
    Measured {
        elements,
        bytes_per_iter: arrays_touched * elements as u64 * 4,
        ms_per_iter,
    }
}

/// Device-to-device copy: reads and writes the buffer once per iteration.
fn bench_copy(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements.max(MIN_COPY_ELEMENTS);
    let src = filled(gpu, n, 1.0)?;
    let mut dst = gpu.alloc_zeros::<f32>(n)?;
    let stream = gpu.stream().clone();
    let ms = time_per_iter(gpu, args, || {
        stream
            .memcpy_dtod(&src, &mut dst)
            .map_err(cuda_err("memcpy_dtod"))
    })?;
    Ok(measured(n, 2, ms))
}

/// `dst += src`: reads dst and src, writes dst.
fn bench_add_assign(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut dst = filled(gpu, n, 0.0)?;
    let src = filled(gpu, n, 1e-3)?;
    let ms = time_per_iter(gpu, args, || optim::add_assign(gpu, &mut dst, &src))?;
    Ok(measured(n, 3, ms))
}

/// `dst += alpha src`: reads dst and src, writes dst.
fn bench_axpy(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut dst = filled(gpu, n, 0.0)?;
    let src = filled(gpu, n, 1e-3)?;
    let ms = time_per_iter(gpu, args, || optim::axpy(gpu, &mut dst, -0.5, &src))?;
    Ok(measured(n, 3, ms))
}

/// AdaGrad: reads w, accum, grad; writes w, accum.
fn bench_adagrad(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut w = filled(gpu, n, 0.5)?;
    let mut accum = filled(gpu, n, 0.0)?;
    let grad = filled(gpu, n, 0.01)?;
    let p = AdaGrad::default();
    let ms = time_per_iter(gpu, args, || {
        optim::adagrad_step(gpu, &mut w, &grad, &mut accum, &p)
    })?;
    Ok(measured(n, 5, ms))
}

/// Adam: reads w, m, v, grad; writes w, m, v.
fn bench_adam(gpu: &Gpu, args: &Args) -> Result<Measured, KernelError> {
    let n = args.elements;
    let mut w = filled(gpu, n, 0.5)?;
    let mut m = filled(gpu, n, 0.0)?;
    let mut v = filled(gpu, n, 0.0)?;
    let grad = filled(gpu, n, 0.01)?;
    let p = Adam::default();
    let mut step = 0u64;
    let ms = time_per_iter(gpu, args, || {
        step += 1;
        optim::adam_step(gpu, &mut w, &grad, &mut m, &mut v, &p, step)
    })?;
    Ok(measured(n, 7, ms))
}
