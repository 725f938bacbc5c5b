//! `harp-kernel-bench`: GPU bandwidth benchmark (being written; see docs/KERNELS.md).

fn main() {
    eprintln!("harp-kernel-bench: not implemented yet");
}
