//! The MLR executor: one slice of the training rows and one of the held-out rows, and the
//! buffers its tasks reuse.

use super::{MlrArgs, MlrConfig, MlrLayout, MlrOutput};
use crate::data::Dataset;
use crate::device::Compute;
use harp::{AppError, Executor, ParamClient, Table};
use harp_kernels::{MlrScratch, MlrShape};
use std::ops::Range;
use std::sync::Arc;

pub struct MlrExecutor {
    config: MlrConfig,
    layout: MlrLayout,
    weights: Table<f32>,
    weight_rows: Vec<u64>,
    train: Arc<Dataset>,
    train_rows: Range<usize>,
    test: Arc<Dataset>,
    test_rows: Range<usize>,
    w: Vec<f32>,
    scratch: MlrScratch,
    /// The GPU path (`--device cuda`); `None` computes on the CPU.
    #[cfg(feature = "cuda")]
    gpu: Option<super::gpu::MlrGpu>,
}

impl MlrExecutor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: MlrConfig,
        layout: MlrLayout,
        weights: Table<f32>,
        train: Arc<Dataset>,
        train_rows: Range<usize>,
        test: Arc<Dataset>,
        test_rows: Range<usize>,
        compute: &Compute,
    ) -> Self {
        #[cfg(not(feature = "cuda"))]
        let _ = compute;
        Self {
            #[cfg(feature = "cuda")]
            gpu: match compute {
                Compute::Gpu(gpu) => Some(super::gpu::MlrGpu::new(gpu.clone())),
                Compute::Cpu => None,
            },
            weight_rows: (0..layout.rows() as u64).collect(),
            w: Vec::with_capacity(layout.padded_values()),
            scratch: MlrScratch::with_capacity(config.batch, layout.classes),
            config,
            layout,
            weights,
            train,
            train_rows,
            test,
            test_rows,
        }
    }

    fn shape(&self) -> MlrShape {
        MlrShape {
            features: self.layout.features,
            classes: self.layout.classes,
        }
    }

    fn params(&self) -> usize {
        self.layout.features * self.layout.classes
    }

    /// Reads every block of the weight matrix into `self.w` (features × classes, padded).
    async fn load_weights(&mut self, ps: &mut ParamClient) -> Result<(), AppError> {
        ps.get_many_into(&self.weights, &self.weight_rows, &mut self.w)
            .await?;
        Ok(())
    }

    /// The training rows of minibatch `iteration`, empty past the end of the slice.
    fn batch_rows(&self, iteration: u32) -> Range<usize> {
        let start = self.train_rows.start + iteration as usize * self.config.batch;
        let start = start.min(self.train_rows.end);
        start..(start + self.config.batch).min(self.train_rows.end)
    }

    async fn train(
        &mut self,
        epoch: u32,
        iteration: u32,
        ps: &mut ParamClient,
    ) -> Result<MlrOutput, AppError> {
        let rows = self.batch_rows(iteration);
        if rows.is_empty() {
            return Ok(MlrOutput::Train {
                epoch,
                iteration,
                loss_sum: 0.0,
                rows: 0,
            });
        }
        #[cfg(feature = "cuda")]
        if self.gpu.is_some() {
            return self.train_on_gpu(epoch, iteration, rows, ps).await;
        }
        if self.layout.weight_per_row {
            return self.train_per_weight(epoch, iteration, rows, ps).await;
        }
        // Read the weight blocks in place and write each block's update into its own row:
        // no copy of the matrix either way.
        let blocks = ps.get_many(&self.weights, &self.weight_rows).await?;
        let w_blocks: Vec<&[f32]> = blocks.iter().map(|b| b.as_slice()).collect();
        let width = self.weights.width();
        let mut deltas: Vec<Vec<f32>> = (0..self.layout.blocks).map(|_| vec![0.0; width]).collect();
        let mut delta_refs: Vec<&mut [f32]> = deltas.iter_mut().map(Vec::as_mut_slice).collect();
        let (x, labels) = slice_rows(&self.train, rows.clone())?;
        let loss_sum = harp_kernels::gradient_blocked(
            self.shape(),
            self.layout.block_features,
            x,
            labels,
            &w_blocks,
            -self.config.lr / rows.len() as f32,
            &mut delta_refs,
            &mut self.scratch,
        )?;
        drop(blocks);
        ps.update_many_owned(&self.weights, &self.weight_rows, deltas)?;
        Ok(MlrOutput::Train {
            epoch,
            iteration,
            loss_sum,
            rows: rows.len() as u64,
        })
    }

    /// [`Self::train`] with one row per weight: the rows are read into one matrix, the
    /// gradient is computed over it and sent back one weight per row.
    async fn train_per_weight(
        &mut self,
        epoch: u32,
        iteration: u32,
        rows: Range<usize>,
        ps: &mut ParamClient,
    ) -> Result<MlrOutput, AppError> {
        self.load_weights(ps).await?;
        let params = self.params();
        let alpha = -self.config.lr / rows.len() as f32;
        let (x, labels) = slice_rows(&self.train, rows.clone())?;
        let mut grad = vec![0.0; params];
        let loss_sum = harp_kernels::gradient_scaled(
            self.shape(),
            x,
            labels,
            &self.w[..params],
            alpha,
            &mut grad,
            &mut self.scratch,
        )?;
        ps.update_many_owned(&self.weights, &self.weight_rows, self.table_rows(&grad))?;
        Ok(MlrOutput::Train {
            epoch,
            iteration,
            loss_sum,
            rows: rows.len() as u64,
        })
    }

    /// A `features × classes` matrix cut into the table's rows (the last one padded).
    fn table_rows(&self, matrix: &[f32]) -> Vec<Vec<f32>> {
        let width = self.weights.width();
        matrix
            .chunks(width)
            .map(|row| {
                let mut row = row.to_vec();
                row.resize(width, 0.0);
                row
            })
            .collect()
    }

    /// [`Self::train`] on the GPU: the weights are gathered into one matrix, the gradient
    /// comes back as one and is cut into the table's blocks (the last one padded).
    #[cfg(feature = "cuda")]
    async fn train_on_gpu(
        &mut self,
        epoch: u32,
        iteration: u32,
        rows: Range<usize>,
        ps: &mut ParamClient,
    ) -> Result<MlrOutput, AppError> {
        self.load_weights(ps).await?;
        let (shape, params) = (self.shape(), self.params());
        let alpha = -self.config.lr / rows.len() as f32;
        let (x, labels) = slice_rows(&self.train, rows.clone())?;
        let Some(gpu) = self.gpu.as_mut() else {
            return Err("mlr: the GPU path without a GPU".into());
        };
        let (grad, loss_sum) =
            gpu.gradient(shape, iteration, x, labels, &self.w[..params], alpha)?;
        let deltas = self.table_rows(&grad);
        ps.update_many_owned(&self.weights, &self.weight_rows, deltas)?;
        Ok(MlrOutput::Train {
            epoch,
            iteration,
            loss_sum,
            rows: rows.len() as u64,
        })
    }

    async fn eval(&mut self, ps: &mut ParamClient) -> Result<MlrOutput, AppError> {
        let rows = self.test_rows.clone();
        if rows.is_empty() {
            return Ok(MlrOutput::Eval {
                correct: 0,
                loss_sum: 0.0,
                rows: 0,
            });
        }
        self.load_weights(ps).await?;
        let (x, labels) = slice_rows(&self.test, rows.clone())?;
        let params = self.params();
        let (correct, loss_sum) = harp_kernels::evaluate(
            self.shape(),
            x,
            labels,
            &self.w[..params],
            &mut self.scratch,
        )?;
        Ok(MlrOutput::Eval {
            correct: correct as u64,
            loss_sum,
            rows: rows.len() as u64,
        })
    }
}

/// Features and labels of `rows` (ranges come from `partition_range`, so they are in bounds).
fn slice_rows(data: &Dataset, rows: Range<usize>) -> Result<(&[f32], &[u32]), AppError> {
    data.batch(rows.clone())
        .ok_or_else(|| format!("rows {rows:?} are outside {}", data.source).into())
}

impl Executor<super::MlrApp> for MlrExecutor {
    async fn run_task(
        &mut self,
        args: MlrArgs,
        ps: &mut ParamClient,
    ) -> Result<MlrOutput, AppError> {
        match args {
            MlrArgs::Train { epoch, iteration } => self.train(epoch, iteration, ps).await,
            MlrArgs::Eval { .. } => self.eval(ps).await,
        }
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        // Minibatches are addressed by (epoch, iteration) in the task args, and the data is
        // re-read from the dataset: the executor has no state of its own to carry.
        Ok(Vec::new())
    }

    fn restore_state(&mut self, _state: &[u8]) -> Result<(), AppError> {
        Ok(())
    }
}
