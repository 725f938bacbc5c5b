//! Runs the least-squares example on a small in-process cluster and prints its progress.

use harp_examples::least_squares::LeastSquares;
use std::sync::Arc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let app = Arc::new(LeastSquares::new(16, 1_000, 50, 200).map_err(|e| anyhow::anyhow!("{e}"))?);
    let config = harp::JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 4,
        collect_params: true,
        ..Default::default()
    };
    let outcome = harp::run_job(app.clone(), &config).await?;
    for (round, mse) in outcome.driver.history.iter().enumerate().step_by(20) {
        println!("round {round:>4}  minibatch mse {mse:.6}");
    }
    let w = outcome
        .params
        .as_ref()
        .and_then(|p| p.row(app.weights(), 0))
        .unwrap_or_default();
    println!("learned w = {w:.2?}");
    println!(
        "{} tasks in {:.2}s",
        outcome.stats.tasks_completed, outcome.stats.elapsed_s
    );
    Ok(())
}
