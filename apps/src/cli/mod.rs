//! The `harp` command line: argument parsing and the `run` subcommands.

mod cluster;
mod run_counter;
mod run_mlr;

use anyhow::Result;
use clap::{Parser, Subcommand};

pub use cluster::ClusterArgs;
pub use run_counter::CounterCliArgs;
pub use run_mlr::MlrCliArgs;

/// harp: an elastic runtime for distributed ML training.
#[derive(Parser, Debug)]
#[command(name = "harp", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run an app on an in-process cluster.
    Run {
        #[command(subcommand)]
        app: RunApp,
    },
}

#[derive(Subcommand, Debug)]
pub enum RunApp {
    /// Multinomial logistic regression (softmax) by minibatch SGD under SSP.
    Mlr(MlrCliArgs),
    /// Exact-accounting app: every parameter must equal its expected sum at the end.
    Counter(CounterCliArgs),
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Run {
            app: RunApp::Mlr(args),
        } => run_mlr::run(args),
        Command::Run {
            app: RunApp::Counter(args),
        } => run_counter::run(args),
    }
}
