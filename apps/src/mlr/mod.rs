//! Multinomial logistic regression (softmax regression) trained by minibatch SGD under
//! stale-synchronous dispatch.
//!
//! The weight matrix (features × classes) lives in one `f32` table whose rows are blocks of
//! `block_features` consecutive features (`block_features × classes` values each), so one
//! read fetches a few large rows rather than many small ones. With
//! [`MlrConfig::weight_per_row`] each weight is a row of its own (SCAR's experiments, where
//! every weight is a parameter); its tasks read the rows into one matrix and send the
//! gradient back one weight per row. Each executor owns a
//! contiguous slice of the training rows and of the held-out rows. A training task takes the
//! executor's next minibatch, reads the weight blocks, computes `-lr/batch × gradient` block
//! by block in place with [`harp_kernels::gradient_blocked`] and sends each block as that
//! row's delta (aggregated on the node). After
//! every epoch the driver dispatches one evaluation task per executor and reports the
//! epoch's training loss and held-out accuracy.

mod driver;
mod executor;
#[cfg(feature = "cuda")]
mod gpu;

pub use driver::{EpochMetrics, MlrDriver, MlrObserver, Quiet};
pub use executor::MlrExecutor;

use crate::data::Dataset;
use crate::device::Compute;
use harp::{App, AppError, ExecutorId, Init, JobInfo, Table, TableSet, UpdateRule};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Training hyperparameters and dispatch policy.
#[derive(Clone, Debug, PartialEq)]
pub struct MlrConfig {
    pub epochs: u32,
    /// Step size of one minibatch update.
    pub lr: f32,
    /// Rows per minibatch (per executor and iteration).
    pub batch: usize,
    /// SSP bound: iteration `i` is dispatched once iteration `i - staleness - 1` completed
    /// (0 = bulk-synchronous).
    pub staleness: u32,
    /// Features per parameter row; `None` picks rows of at least 256 features and about
    /// 16K values. Ignored with `weight_per_row`.
    pub block_features: Option<usize>,
    /// One table row per weight (one feature's weight for one class) instead of blocks of
    /// features: SCAR's experiments treat each of MLR's `features × classes` weights as a
    /// parameter, prioritized by its own distance and lost on its own (§5.5.1: "the model
    /// parameters are an M × N matrix of real numbers"). Every read and update then moves
    /// `features × classes` rows of one value, so this is for experiments, not speed.
    pub weight_per_row: bool,
}

impl Default for MlrConfig {
    fn default() -> Self {
        Self {
            epochs: 10,
            lr: 0.5,
            batch: 100,
            staleness: 1,
            block_features: None,
            weight_per_row: false,
        }
    }
}

/// Arguments of one MLR micro-task.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum MlrArgs {
    /// Minibatch `iteration` (within `epoch`) of the executor's training slice.
    Train { epoch: u32, iteration: u32 },
    /// Evaluate the current weights on the executor's held-out slice.
    Eval { epoch: u32 },
}

/// Output of one MLR micro-task.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub enum MlrOutput {
    Train {
        epoch: u32,
        iteration: u32,
        loss_sum: f64,
        rows: u64,
    },
    Eval {
        correct: u64,
        loss_sum: f64,
        rows: u64,
    },
}

/// The shape of the model: how the weight matrix is laid out in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlrLayout {
    pub features: usize,
    pub classes: usize,
    pub block_features: usize,
    pub blocks: usize,
    /// One table row per weight ([`MlrConfig::weight_per_row`]); `block_features` is 1.
    pub weight_per_row: bool,
}

impl MlrLayout {
    fn new(features: usize, classes: usize, config: &MlrConfig) -> Result<Self, AppError> {
        if features == 0 || classes < 2 {
            return Err(format!(
                "mlr needs at least 1 feature and 2 classes (got {features} and {classes})"
            )
            .into());
        }
        // Default: rows of at least 256 features and about 16K values, so that the blocked
        // GEMM runs on large panels while a big model still spreads over several shards.
        let block_features = if config.weight_per_row {
            1
        } else {
            config
                .block_features
                .unwrap_or((16_384 / classes).max(256))
                .clamp(1, features)
        };
        Ok(Self {
            features,
            classes,
            block_features,
            blocks: features.div_ceil(block_features),
            weight_per_row: config.weight_per_row,
        })
    }

    /// Values in the padded weight buffer (all blocks).
    pub fn padded_values(&self) -> usize {
        self.blocks * self.block_features * self.classes
    }

    /// Rows of the weight table: one per block of features, or one per weight.
    pub fn rows(&self) -> usize {
        if self.weight_per_row {
            self.padded_values()
        } else {
            self.blocks
        }
    }

    /// Values per row of the weight table.
    pub fn row_width(&self) -> usize {
        if self.weight_per_row {
            1
        } else {
            self.block_features * self.classes
        }
    }
}

/// The MLR app over a training set and a held-out set.
pub struct MlrApp {
    config: MlrConfig,
    train: Arc<Dataset>,
    test: Arc<Dataset>,
    layout: MlrLayout,
    tables: TableSet,
    weights: Table<f32>,
    observer: Arc<dyn MlrObserver>,
    compute: Compute,
}

impl MlrApp {
    pub fn new(
        config: MlrConfig,
        train: Arc<Dataset>,
        test: Arc<Dataset>,
        observer: Arc<dyn MlrObserver>,
    ) -> Result<Self, AppError> {
        if config.batch == 0 || config.epochs == 0 {
            return Err("mlr: batch and epochs must be at least 1".into());
        }
        if !config.lr.is_finite() || config.lr <= 0.0 {
            return Err(format!(
                "mlr: the learning rate must be a positive number, got {}",
                config.lr
            )
            .into());
        }
        if train.num_features != test.num_features {
            return Err(format!(
                "mlr: training data has {} features but held-out data has {}",
                train.num_features, test.num_features
            )
            .into());
        }
        let classes = train.num_classes.max(test.num_classes);
        let layout = MlrLayout::new(train.num_features, classes, &config)?;
        let mut tables = TableSet::new();
        let weights = tables.dense_f32(
            "mlr.weights",
            layout.row_width(),
            UpdateRule::Add,
            Init::Zeros,
        )?;
        Ok(Self {
            config,
            train,
            test,
            layout,
            tables,
            weights,
            observer,
            compute: Compute::Cpu,
        })
    }

    /// Computes the training gradients on `compute` (`--device`); the CPU by default.
    /// Held-out evaluation stays on the CPU (one pass per epoch).
    pub fn with_compute(mut self, compute: Compute) -> Result<Self, AppError> {
        #[cfg(feature = "cuda")]
        compute.prepare(&gpu::KERNELS)?;
        self.compute = compute;
        Ok(self)
    }

    pub fn layout(&self) -> MlrLayout {
        self.layout
    }

    pub fn weights(&self) -> &Table<f32> {
        &self.weights
    }

    /// Minibatch iterations per epoch for `executors` executors: enough for the largest slice.
    pub fn iterations_per_epoch(&self, executors: u32) -> u32 {
        let largest = self.train.rows().div_ceil(executors.max(1) as usize);
        largest.div_ceil(self.config.batch).max(1) as u32
    }
}

impl App for MlrApp {
    type Args = MlrArgs;
    type Output = MlrOutput;
    type Driver = MlrDriver;
    type Executor = MlrExecutor;

    fn name(&self) -> &str {
        "mlr"
    }

    fn settings(&self) -> Vec<String> {
        let c = &self.config;
        vec![
            format!("epochs {}", c.epochs),
            format!("lr {:?}", c.lr),
            format!("batch {}", c.batch),
            format!("staleness {}", c.staleness),
            format!("training rows {}", self.train.rows()),
            format!("held-out rows {}", self.test.rows()),
        ]
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, job: &JobInfo) -> Result<MlrDriver, AppError> {
        Ok(MlrDriver::new(
            self.config.epochs,
            self.config.staleness,
            self.iterations_per_epoch(job.num_executors),
            job.num_executors,
            self.test.rows() as u64,
            self.observer.clone(),
        ))
    }

    fn create_executor(&self, id: ExecutorId, job: &JobInfo) -> Result<MlrExecutor, AppError> {
        let parts = job.num_executors as usize;
        let train_rows = self.train.partition_range(parts, id.0 as usize)?;
        let test_rows = self.test.partition_range(parts, id.0 as usize)?;
        Ok(MlrExecutor::new(
            self.config.clone(),
            self.layout,
            self.weights.clone(),
            self.train.clone(),
            train_rows,
            self.test.clone(),
            test_rows,
            &self.compute,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::synthetic_classification;

    fn app(config: MlrConfig, rows: usize) -> MlrApp {
        let data = synthetic_classification(rows, 8, 3, 1).unwrap();
        let (train, test) = data.split_tail(rows / 5).unwrap();
        MlrApp::new(config, Arc::new(train), Arc::new(test), Arc::new(Quiet)).unwrap()
    }

    /// A node's settings must equal the master's to join (`App::settings`): the same run
    /// arguments give the same lines; a learning rate or a dataset size of its own does not.
    #[test]
    fn settings_name_the_learning_rate_and_the_dataset_size() {
        let base = app(MlrConfig::default(), 100).settings();
        assert_eq!(base, app(MlrConfig::default(), 100).settings());
        assert!(base.contains(&"lr 0.5".to_string()), "{base:?}");
        let faster = MlrConfig {
            lr: 5.0,
            ..MlrConfig::default()
        };
        let other = app(faster, 100).settings();
        let differ: Vec<_> = base.iter().zip(&other).filter(|(a, b)| a != b).collect();
        assert_eq!(differ, [(&"lr 0.5".to_string(), &"lr 5.0".to_string())]);
        let larger = app(MlrConfig::default(), 200).settings();
        assert!(
            larger.contains(&"training rows 160".to_string()),
            "{larger:?}"
        );
        assert_ne!(base, larger);
    }
}
