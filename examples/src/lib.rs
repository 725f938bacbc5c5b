//! Small harp apps to copy when writing your own.
//!
//! * [`least_squares`]: linear regression by minibatch SGD, with the weights in a table
//!   whose server-side rule is AdaGrad, a bulk-synchronous driver and stateful executors.
//!   Run it with `cargo run --release -p harp-examples --bin least_squares`.

pub mod least_squares;
