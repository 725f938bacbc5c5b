//! The `harp` command.

use clap::Parser;

/// mimalloc keeps the large, short-lived row buffers of training in process memory instead
/// of mapping and zeroing fresh pages for each.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use harp_apps::cli::{run, Cli};

fn main() {
    harp_apps::cli::init_logging();
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        harp_apps::cli::eprint_line(&format!("error: {}", describe(&e)));
        // A job stopped by a signal ends as if the signal had ended it.
        std::process::exit(harp_apps::cli::stopped_by().map_or(1, |signal| 128 + signal));
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
