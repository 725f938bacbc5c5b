//! The CNN executor: its share of each minibatch's gradient, the Adam steps of the rows it
//! owns, and the evaluation of its part of the held-out images (see the module doc of
//! [`super`]).

use super::network::{Network, Passes, IMAGE_PIXELS, TENSORS};
use super::tables::TensorTables;
use super::{CnnArgs, CnnConfig, CnnOutput};
use crate::data::Dataset;
use crate::device::Compute;
use harp::{AppError, Executor, ParamClient};
use std::ops::Range;
use std::sync::Arc;

pub struct CnnExecutor {
    id: u32,
    executors: u32,
    batch: usize,
    seed: u64,
    network: Arc<Network>,
    layout: Arc<[TensorTables]>,
    train: Arc<Dataset>,
    test: Arc<Dataset>,
    test_rows: Range<usize>,
    /// The training order of `order_epoch` (a permutation of the training rows).
    order: Vec<u32>,
    order_epoch: Option<u32>,
    /// Every row of every tensor (0..rows), to read a whole table.
    all_rows: Vec<Vec<u64>>,
    /// Per tensor: the rows this executor applies, and the slots it reads for them
    /// (every executor's slot of the first row, then of the second, ...).
    applied_rows: Vec<Vec<u64>>,
    applied_slots: Vec<Vec<u64>>,
    /// The current weights (initial + table), padded, per tensor.
    weights: [Vec<f32>; TENSORS],
    grads: [Vec<f32>; TENSORS],
    passes: Passes,
    /// The GPU path (`--device cuda`); `None` computes on the CPU.
    #[cfg(feature = "cuda")]
    gpu: Option<super::gpu::CnnGpu>,
}

impl CnnExecutor {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        id: u32,
        executors: u32,
        config: &CnnConfig,
        network: Arc<Network>,
        layout: Arc<[TensorTables]>,
        train: Arc<Dataset>,
        test: Arc<Dataset>,
        test_rows: Range<usize>,
        compute: &Compute,
    ) -> Self {
        #[cfg(not(feature = "cuda"))]
        let _ = compute;
        let all_rows: Vec<Vec<u64>> = layout.iter().map(|t| (0..t.rows).collect()).collect();
        // Rows numbered globally across tensors; executor e owns those ≡ e (mod E).
        let mut applied_rows = Vec::with_capacity(layout.len());
        let mut applied_slots = Vec::with_capacity(layout.len());
        let mut global = 0u64;
        for t in layout.iter() {
            let mut rows = Vec::new();
            let mut slots = Vec::new();
            for r in 0..t.rows {
                if global % u64::from(executors) == u64::from(id) {
                    rows.push(r);
                    slots.extend((0..executors).map(|e| t.slot(e, r)));
                }
                global += 1;
            }
            applied_rows.push(rows);
            applied_slots.push(slots);
        }
        let grads = std::array::from_fn(|i| {
            layout
                .get(i)
                .map_or_else(Vec::new, |t| vec![0.0; t.padded_len()])
        });
        Self {
            id,
            executors,
            batch: config.batch,
            seed: config.seed,
            network,
            layout,
            train,
            test,
            test_rows,
            order: Vec::new(),
            order_epoch: None,
            all_rows,
            applied_rows,
            applied_slots,
            weights: Default::default(),
            grads,
            passes: Passes::default(),
            #[cfg(feature = "cuda")]
            gpu: match compute {
                Compute::Gpu(gpu) => Some(super::gpu::CnnGpu::new(gpu.clone())),
                Compute::Cpu => None,
            },
        }
    }

    /// Reads every parameter table and adds the initial values: `self.weights`.
    async fn load_weights(&mut self, ps: &mut ParamClient) -> Result<(), AppError> {
        for ((t, rows), w) in self
            .layout
            .iter()
            .zip(&self.all_rows)
            .zip(self.weights.iter_mut())
        {
            ps.get_many_into(&t.params, rows, w).await?;
            for (v, &init) in w.iter_mut().zip(t.initial.iter()) {
                *v += init;
            }
        }
        Ok(())
    }

    /// The training order of `epoch`: a Fisher–Yates shuffle seeded by `(seed, epoch)`.
    fn shuffle_for(&mut self, epoch: u32) {
        if self.order_epoch != Some(epoch) {
            let n = self.train.rows() as u32;
            self.order = (0..n).collect();
            let mut state = self.seed ^ (u64::from(epoch) + 1).wrapping_mul(0xA076_1D64_78BD_642F);
            for i in (1..self.order.len()).rev() {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let j = ((state >> 33) % (i as u64 + 1)) as usize;
                self.order.swap(i, j);
            }
            self.order_epoch = Some(epoch);
        }
    }

    /// Copies the images and labels of `positions` of the epoch's order into the passes.
    fn gather(&mut self, epoch: u32, positions: Range<usize>) -> Result<(), AppError> {
        self.shuffle_for(epoch);
        let train = &self.train;
        let picked = self
            .order
            .get(positions.clone())
            .ok_or_else(|| format!("cnn: minibatch positions {positions:?} out of range"))?;
        let p = &mut self.passes;
        p.input.clear();
        p.labels.clear();
        for &row in picked {
            let (x, y) = train
                .batch(row as usize..row as usize + 1)
                .ok_or("cnn: a training row out of range")?;
            p.input.extend_from_slice(x);
            p.labels.extend_from_slice(y);
        }
        Ok(())
    }

    async fn gradient(
        &mut self,
        epoch: u32,
        batch: u32,
        ps: &mut ParamClient,
    ) -> Result<CnnOutput, AppError> {
        let rows = self.train.rows();
        let start = (batch as usize * self.batch).min(rows);
        let len = self.batch.min(rows - start);
        let e = self.id as usize;
        let executors = self.executors as usize;
        let mine = start + len * e / executors..start + len * (e + 1) / executors;
        if mine.is_empty() || len == 0 {
            return Ok(CnnOutput::Gradient {
                loss_sum: 0.0,
                correct: 0,
                images: 0,
            });
        }
        let images = mine.len() as u64;
        self.gather(epoch, mine)?;
        self.load_weights(ps).await?;
        let w = weight_slices(&self.weights, &self.layout)?;
        let scale = 1.0 / len as f32;
        #[cfg(feature = "cuda")]
        let on_gpu = match self.gpu.as_mut() {
            Some(gpu) => Some(gpu.train_pass(
                &self.network,
                &w,
                scale,
                &mut self.grads,
                &self.passes.input,
                &self.passes.labels,
            )?),
            None => None,
        };
        #[cfg(not(feature = "cuda"))]
        let on_gpu: Option<(f64, u64)> = None;
        let (loss_sum, correct) = match on_gpu {
            Some(result) => result,
            None => self
                .network
                .train_pass(&w, scale, &mut self.grads, &mut self.passes)?,
        };
        for (t, g) in self.layout.iter().zip(&self.grads) {
            let slots: Vec<u64> = (0..t.rows).map(|r| t.slot(self.id, r)).collect();
            let deltas: Vec<Vec<f32>> = g.chunks_exact(t.width).map(<[f32]>::to_vec).collect();
            ps.update_many_owned(&t.grads, &slots, deltas)?;
        }
        Ok(CnnOutput::Gradient {
            loss_sum,
            correct,
            images,
        })
    }

    async fn apply(&mut self, ps: &mut ParamClient) -> Result<CnnOutput, AppError> {
        let executors = self.executors as usize;
        let mut applied = 0u64;
        for ((t, rows), slots) in self
            .layout
            .iter()
            .zip(&self.applied_rows)
            .zip(&self.applied_slots)
        {
            if rows.is_empty() {
                continue;
            }
            let shares = ps.get_many(&t.grads, slots).await?;
            let mut sums = Vec::with_capacity(rows.len());
            let mut resets = Vec::with_capacity(slots.len());
            for row_shares in shares.chunks_exact(executors) {
                let mut sum = vec![0.0f32; t.width];
                for share in row_shares {
                    for (s, &g) in sum.iter_mut().zip(share.iter()) {
                        *s += g;
                    }
                    resets.push(share.iter().map(|&g| -g).collect::<Vec<f32>>());
                }
                sums.push(sum);
            }
            drop(shares);
            ps.update_many_owned(&t.params, rows, sums)?;
            ps.update_many_owned(&t.grads, slots, resets)?;
            applied += rows.len() as u64;
        }
        Ok(CnnOutput::Applied { rows: applied })
    }

    async fn eval(&mut self, ps: &mut ParamClient) -> Result<CnnOutput, AppError> {
        let rows = self.test_rows.clone();
        if rows.is_empty() {
            return Ok(CnnOutput::Eval {
                loss_sum: 0.0,
                correct: 0,
                images: 0,
            });
        }
        self.load_weights(ps).await?;
        let w = weight_slices(&self.weights, &self.layout)?;
        let mut loss_sum = 0.0;
        let mut correct = 0;
        // Chunks of 500 images bound the activation buffers.
        for start in rows.clone().step_by(500) {
            let chunk = start..(start + 500).min(rows.end);
            let (x, y) = self
                .test
                .batch(chunk.clone())
                .ok_or("cnn: a held-out row out of range")?;
            debug_assert_eq!(x.len(), chunk.len() * IMAGE_PIXELS);
            self.passes.input.clear();
            self.passes.input.extend_from_slice(x);
            self.passes.labels.clear();
            self.passes.labels.extend_from_slice(y);
            #[cfg(feature = "cuda")]
            let on_gpu = match self.gpu.as_mut() {
                Some(gpu) => {
                    if start == rows.start {
                        gpu.set_weights(&w)?;
                    }
                    Some(gpu.evaluate(&self.network, &self.passes.input, &self.passes.labels)?)
                }
                None => None,
            };
            #[cfg(not(feature = "cuda"))]
            let on_gpu: Option<(u64, f64)> = None;
            let (c, l) = match on_gpu {
                Some(result) => result,
                None => self.network.evaluate(&w, &mut self.passes)?,
            };
            correct += c;
            loss_sum += l;
        }
        Ok(CnnOutput::Eval {
            loss_sum,
            correct,
            images: rows.len() as u64,
        })
    }
}

/// Each tensor's weights: the first `len` values of its padded buffer.
fn weight_slices<'a>(
    weights: &'a [Vec<f32>; TENSORS],
    layout: &[TensorTables],
) -> Result<[&'a [f32]; TENSORS], AppError> {
    let mut out: [&[f32]; TENSORS] = [&[]; TENSORS];
    for ((slot, w), t) in out.iter_mut().zip(weights).zip(layout) {
        *slot = w
            .get(..t.tensor.len())
            .ok_or("cnn: a parameter table returned fewer values than its tensor has")?;
    }
    Ok(out)
}

impl Executor<super::CnnApp> for CnnExecutor {
    async fn run_task(
        &mut self,
        args: CnnArgs,
        ps: &mut ParamClient,
    ) -> Result<CnnOutput, AppError> {
        match args {
            CnnArgs::Gradient { epoch, batch } => self.gradient(epoch, batch, ps).await,
            CnnArgs::Apply { .. } => self.apply(ps).await,
            CnnArgs::Eval { .. } => self.eval(ps).await,
        }
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        // Minibatches are addressed by (epoch, batch) in the task args, the order is a
        // function of the seed, and the data is re-read: nothing of its own to carry.
        Ok(Vec::new())
    }

    fn restore_state(&mut self, _state: &[u8]) -> Result<(), AppError> {
        Ok(())
    }
}
