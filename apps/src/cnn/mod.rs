//! A convolutional network (SCAR §5.5.1: two convolutions with ReLU and max pooling, then
//! three fully connected layers) trained with Adam on 28×28 digit images, data-parallel on
//! harp's parameter servers.
//!
//! * [`network`]: the layers, their parameter tensors and seeded initial values, and the
//!   forward/backward pass over a minibatch (`harp_kernels::cnn`).
//! * [`tables`](mod@tables): the parameters in tables under Adam (the moments and step
//!   count on the servers, with each row), laid out by `--partition layer|shard`, and one
//!   additive gradient slot per executor and row.
//! * [`CnnDriver`], [`CnnExecutor`]: the training loop.
//!
//! One training step (one global minibatch of `batch` images, the same in every job) is
//! two phases, one micro-task per executor each, with a barrier between them (a
//! completion reaches the driver only once its updates are applied):
//!
//! 1. `Gradient`: executor `e` of `E` reads the parameters, runs the forward and backward
//!    pass over its share of the minibatch (positions `⌊len·e/E⌋..⌊len·(e+1)/E⌋`), and
//!    writes the gradient of the minibatch's *mean* loss restricted to those images into
//!    its slots;
//! 2. `Apply`: executor `e` owns the rows `g ≡ e (mod E)` of the global row list; for each
//!    it reads every executor's slot, adds them in executor order, sends the sum to the
//!    parameter row (one Adam step on the server) and sends each slot its negation (the
//!    slot is exactly zero again).
//!
//! So every row gets exactly one Adam step per minibatch, with the whole minibatch's
//! gradient, however many workers flush and in whatever order: the result does not depend
//! on the layout (`layer` and `shard` give the same bits) and depends on the executor count
//! only through the floating-point sum of the shares. The training images are shuffled
//! each epoch by a permutation of `(seed, epoch)`. After each epoch every executor
//! evaluates its contiguous part of the held-out images.

mod driver;
mod executor;
#[cfg(feature = "cuda")]
mod gpu;
pub mod network;
pub mod tables;

pub use driver::{CnnDriver, CnnMetrics, CnnObserver};
pub use executor::CnnExecutor;
pub use network::{Network, NetworkShape};
pub use tables::{Partition, TensorTables};

use crate::data::Dataset;
use crate::device::Compute;
use harp::{App, AppError, ExecutorId, JobInfo, TableSet};
use harp_kernels::optim::Adam;
use network::{IMAGE_PIXELS, IMAGE_SIDE};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Hyperparameters and layout.
#[derive(Clone, Debug, PartialEq)]
pub struct CnnConfig {
    pub epochs: u32,
    /// Images per global minibatch (split among the executors).
    pub batch: usize,
    /// Adam's step size (α); β₁ = 0.9, β₂ = 0.999, ε = 1e-8 as in SCAR.
    pub lr: f32,
    /// Seed of the initial weights and of the per-epoch shuffles.
    pub seed: u64,
    pub partition: Partition,
    /// With [`Partition::Shard`]: row groups per tensor (at most its first dimension).
    pub pieces: usize,
    pub shape: NetworkShape,
    /// Stop each epoch after this many minibatches (`None`: the whole training set); for
    /// short runs and tests.
    pub max_batches: Option<u32>,
}

impl Default for CnnConfig {
    /// SCAR's settings: batch 64, Adam with α = 0.001.
    fn default() -> Self {
        Self {
            epochs: 3,
            batch: 64,
            lr: 1e-3,
            seed: 1,
            partition: Partition::Shard,
            pieces: 16,
            shape: NetworkShape::default(),
            max_batches: None,
        }
    }
}

/// One CNN micro-task.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum CnnArgs {
    /// Compute this executor's share of minibatch `batch` of `epoch`.
    Gradient { epoch: u32, batch: u32 },
    /// Apply the summed gradients of this executor's rows.
    Apply { epoch: u32, batch: u32 },
    /// Evaluate this executor's part of the held-out images.
    Eval { epoch: u32 },
}

/// What a micro-task reports.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub enum CnnOutput {
    Gradient {
        loss_sum: f64,
        correct: u64,
        images: u64,
    },
    Applied {
        rows: u64,
    },
    Eval {
        loss_sum: f64,
        correct: u64,
        images: u64,
    },
}

/// The CNN app over a training and a held-out set of 28×28 images.
pub struct CnnApp {
    config: CnnConfig,
    network: Arc<Network>,
    train: Arc<Dataset>,
    test: Arc<Dataset>,
    tables: TableSet,
    layout: Arc<[TensorTables]>,
    observer: Arc<dyn CnnObserver>,
    compute: Compute,
}

/// Checks that `data` holds 28×28 images with labels below 10, naming the file otherwise
/// (the labels file of an IDX pair for a label).
pub fn check_images(data: &Dataset) -> Result<(), AppError> {
    let square = [IMAGE_SIDE as u64, IMAGE_SIDE as u64];
    let dims = data.idx.as_ref().map(|idx| idx.item_dims.as_slice());
    if data.num_features != IMAGE_PIXELS || dims.is_some_and(|dims| dims != square) {
        let shape = match dims {
            Some(dims) => (dims.iter().map(u64::to_string))
                .collect::<Vec<_>>()
                .join("x"),
            None => format!("{} values", data.num_features),
        };
        return Err(format!(
            "{}: images of {shape}; the CNN takes {IMAGE_SIDE}x{IMAGE_SIDE} images ({IMAGE_PIXELS} values)",
            data.source
        )
        .into());
    }
    if data.num_classes > network::CLASSES {
        let labels_file = data
            .idx
            .as_ref()
            .map_or(&data.source, |idx| &idx.labels_path);
        return Err(format!(
            "{labels_file}: labels up to {}; the CNN has {} classes",
            data.num_classes - 1,
            network::CLASSES
        )
        .into());
    }
    Ok(())
}

impl CnnApp {
    /// `train` and `test` hold pixel values scaled to [0, 1].
    pub fn new(
        config: CnnConfig,
        train: Arc<Dataset>,
        test: Arc<Dataset>,
        observer: Arc<dyn CnnObserver>,
    ) -> Result<Self, AppError> {
        if config.epochs == 0 || config.batch == 0 {
            return Err("cnn: epochs and batch must be at least 1".into());
        }
        if config.max_batches == Some(0) {
            return Err("cnn: max_batches must be at least 1".into());
        }
        check_images(&train)?;
        check_images(&test)?;
        let network = Network::new(config.shape)?;
        let adam = Adam {
            lr: config.lr,
            ..Adam::default()
        };
        if !(config.lr.is_finite() && config.lr > 0.0) {
            return Err(format!(
                "cnn: the learning rate must be a positive number, got {}",
                config.lr
            )
            .into());
        }
        let mut tables = TableSet::new();
        let layout = tables::declare(
            &network,
            config.partition,
            config.pieces,
            adam,
            config.seed,
            &mut tables,
        )?;
        Ok(Self {
            config,
            network: Arc::new(network),
            train,
            test,
            tables,
            layout: layout.into(),
            observer,
            compute: Compute::Cpu,
        })
    }

    /// Runs the forward and backward passes on `compute` (`--device`); the CPU by
    /// default. The Adam steps (on the servers) stay on the CPU.
    pub fn with_compute(mut self, compute: Compute) -> Result<Self, AppError> {
        #[cfg(feature = "cuda")]
        compute.prepare(&gpu::KERNELS)?;
        self.compute = compute;
        Ok(self)
    }

    pub fn network(&self) -> &Network {
        &self.network
    }

    /// Every tensor's tables.
    pub fn layout(&self) -> &[TensorTables] {
        &self.layout
    }

    /// Minibatches per epoch.
    pub fn batches_per_epoch(&self) -> u32 {
        let all = self.train.rows().div_ceil(self.config.batch);
        let all = u32::try_from(all).unwrap_or(u32::MAX);
        self.config.max_batches.map_or(all, |m| m.min(all))
    }
}

impl App for CnnApp {
    type Args = CnnArgs;
    type Output = CnnOutput;
    type Driver = CnnDriver;
    type Executor = CnnExecutor;

    fn name(&self) -> &str {
        "cnn"
    }

    fn settings(&self) -> Vec<String> {
        let c = &self.config;
        vec![
            format!("epochs {}", c.epochs),
            format!("batch {}", c.batch),
            format!("lr {:?}", c.lr),
            format!("seed {}", c.seed),
            format!("max batches {:?}", c.max_batches),
            format!("training images {}", self.train.rows()),
            format!("held-out images {}", self.test.rows()),
        ]
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, job: &JobInfo) -> Result<CnnDriver, AppError> {
        Ok(CnnDriver::new(
            self.config.epochs,
            self.batches_per_epoch(),
            job.num_executors,
            self.test.rows() as u64,
            self.observer.clone(),
        ))
    }

    fn create_executor(&self, id: ExecutorId, job: &JobInfo) -> Result<CnnExecutor, AppError> {
        let executors = job.num_executors.max(1);
        let test_rows = self
            .test
            .partition_range(executors as usize, id.0 as usize)?;
        Ok(CnnExecutor::new(
            id.0,
            executors,
            &self.config,
            self.network.clone(),
            self.layout.clone(),
            self.train.clone(),
            self.test.clone(),
            test_rows,
            &self.compute,
        ))
    }
}
