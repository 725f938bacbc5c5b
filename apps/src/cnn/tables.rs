//! How the CNN's parameter tensors lie in parameter tables (`--partition layer|shard`).
//!
//! Each of the ten tensors (a layer's weights, or its bias) gets two tables:
//!
//! * `cnn.<tensor>` under [`UpdateRule::Adam`]: the tensor split along its first dimension
//!   into `rows` rows of `width` values (the last row zero-padded); the servers apply Adam
//!   to it and keep the moments and step count beside each row. It holds each weight's
//!   displacement from its seeded initial value (see below), so it starts at zero.
//! * `cnn.<tensor>.grad` (additive): one slot per executor and row, row
//!   `executor · rows + r`, where executor `e` leaves its share of a minibatch's gradient.
//!
//! `layer`: one row per tensor (the whole tensor on one shard, the shard picked by the
//! runtime's key hash, so layers land on shards at random as in SCAR). `shard`: each tensor
//! split into `pieces` row groups along its first dimension (fewer when the dimension is
//! smaller), which the hash spreads over the shards.
//!
//! Why the table holds a displacement: a table's seeded initial value is a function of the
//! row and column, so it would differ between the two layouts; the initial weights are
//! instead computed by every executor from the seed ([`super::network::initial_values`]),
//! the same in every layout, and the weights are `initial + table`. Adam's step does not
//! depend on the weight's value, so this is Adam on the weights themselves.

use super::network::{initial_values, Network, ParamTensor};
use harp::{AppError, Init, Table, TableSet, UpdateRule};
use harp_kernels::optim::Adam;
use std::sync::Arc;

/// `--partition`: how the parameters are spread over the shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Partition {
    /// One row (so one shard) per tensor.
    Layer,
    /// Every tensor split into row groups along its first dimension.
    #[default]
    Shard,
}

/// One parameter tensor and its two tables.
#[derive(Clone, Debug)]
pub struct TensorTables {
    pub tensor: ParamTensor,
    /// Rows of the tensor in its table.
    pub rows: u64,
    /// Values per row (the tensor's length rounded up to whole rows).
    pub width: usize,
    /// The parameters (displacements from `initial`), under Adam.
    pub params: Table<f32>,
    /// One gradient slot per executor and row (additive).
    pub grads: Table<f32>,
    /// The seeded initial values, zero-padded to `rows · width`.
    pub initial: Arc<[f32]>,
}

impl TensorTables {
    /// Values in the padded tensor (`rows · width`).
    pub fn padded_len(&self) -> usize {
        self.rows as usize * self.width
    }

    /// The slot row of executor `executor`'s gradient for row `row`.
    pub fn slot(&self, executor: u32, row: u64) -> u64 {
        u64::from(executor) * self.rows + row
    }
}

/// Declares the tables of every tensor of `network`.
pub fn declare(
    network: &Network,
    partition: Partition,
    pieces: usize,
    adam: Adam,
    seed: u64,
    tables: &mut TableSet,
) -> Result<Vec<TensorTables>, AppError> {
    adam.validate().map_err(|e| format!("cnn: Adam: {e}"))?;
    if pieces == 0 {
        return Err("cnn: --pieces must be at least 1".into());
    }
    let mut out = Vec::new();
    for (index, tensor) in network.tensors().into_iter().enumerate() {
        let first = tensor.dims[0];
        let per_slice = tensor.len() / first;
        let slices_per_row = match partition {
            Partition::Layer => first,
            Partition::Shard => first.div_ceil(pieces.min(first)),
        };
        let rows = first.div_ceil(slices_per_row);
        let width = slices_per_row * per_slice;
        let params = tables.dense_f32(
            &format!("cnn.{}", tensor.name),
            width,
            UpdateRule::Adam(adam),
            Init::Zeros,
        )?;
        let grads = tables.dense_f32(
            &format!("cnn.{}.grad", tensor.name),
            width,
            UpdateRule::Add,
            Init::Zeros,
        )?;
        let mut initial = initial_values(&tensor, index, seed);
        initial.resize(rows * width, 0.0);
        out.push(TensorTables {
            tensor,
            rows: rows as u64,
            width,
            params,
            grads,
            initial: initial.into(),
        });
    }
    Ok(out)
}
