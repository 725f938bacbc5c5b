//! harp's training apps, their data loaders, and the `harp` command.
//!
//! | module | owns |
//! |---|---|
//! | [`data`] | the dense [`data::Dataset`], LibSVM / IDX / ratings loaders, the synthetic generator |
//! | [`default_data`] | the default dataset embedded in the binary (mnist10k) |
//! | [`host_memory`] | the memory this machine has available, checked before an input is expanded |
//! | [`device`] | `--device cpu\|cuda[:N]`: where executors compute, and the opened GPU |
//! | [`mlr`] | multinomial logistic regression under SSP |
//! | [`mf`] | matrix factorization of ratings by ALS |
//! | [`lda`] | latent Dirichlet allocation by collapsed Gibbs sampling, vocabulary blocks rotating across executors |
//! | [`cnn`] | a convolutional network trained with Adam on the servers (SCAR's CNN) |
//! | [`counter`] | the exact-accounting app (every update checked) |
//! | [`metrics`] | JSON-lines metrics files |
//! | [`plot`] | convergence plots of metrics files, with their scale events and failures (`harp plot`) |
//! | [`cli`] | the `harp` command line |

pub mod cli;
pub mod cnn;
pub mod counter;
pub mod data;
pub mod default_data;
pub mod device;
pub mod host_memory;
pub mod lda;
pub mod metrics;
pub mod mf;
pub mod mlr;
pub mod plot;
