//! The `harp` command.

use clap::Parser;
use std::io::IsTerminal;

/// mimalloc keeps the large, short-lived row buffers of training in process memory instead
/// of mapping and zeroing fresh pages for each.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use harp_apps::cli::{run, Cli};

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HARP_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {}", describe(&e));
        std::process::exit(1);
    }
}

/// The error and its causes, skipping a cause whose text the message already contains (many
/// errors print their source as part of their own message).
fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let line = cause.to_string();
        if !text.contains(&line) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&line);
        }
    }
    text
}
