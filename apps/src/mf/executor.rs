//! The MF executor: the users and items it owns, their centred training ratings in
//! compressed-row form both ways, its users' held-out ratings and, for SGD, its users'
//! ratings split by item block.

use super::{MfArgs, MfConfig, MfOutput, MfSolver};
use crate::data::RatingsData;
use crate::device::Compute;
use harp::scar::SplitMix64;
use harp::{AppError, Executor, ParamClient, Table};
use harp_kernels::mf::{als_half_step, sgd_step, Csr, Ratings, Sgd};
use std::collections::BTreeSet;

/// One side of the factorization as an executor sees it: the rows it solves and, per row,
/// its ratings against rows of the other (fixed) side.
struct Side {
    /// Table rows this executor solves (owned ids), ascending.
    owned: Vec<u64>,
    /// Table rows of the fixed side its ratings touch, ascending.
    fixed: Vec<u64>,
    /// Compressed rows over `owned`: entries `offsets[r]..offsets[r + 1]`.
    offsets: Vec<u32>,
    /// Index into `fixed` of each entry.
    cols: Vec<u32>,
    /// Centred rating of each entry.
    values: Vec<f32>,
}

impl Side {
    /// `pairs`: (owned id, fixed id, centred rating) of every rating of an owned row.
    fn build(owned: Vec<u64>, mut pairs: Vec<(u64, u64, f32)>) -> Result<Self, AppError> {
        pairs.sort_unstable_by_key(|&(o, f, _)| (o, f));
        let fixed: Vec<u64> = pairs
            .iter()
            .map(|&(_, f, _)| f)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let too_many = || -> AppError { "mf: more than 2^32 ratings in one executor".into() };
        let mut offsets = Vec::with_capacity(owned.len() + 1);
        let mut cols = Vec::with_capacity(pairs.len());
        let mut values = Vec::with_capacity(pairs.len());
        let mut next = pairs.iter().peekable();
        offsets.push(0);
        for &row in &owned {
            while let Some(&&(o, f, v)) = next.peek() {
                if o != row {
                    break;
                }
                let col = fixed.binary_search(&f).map_err(|_| too_many())?;
                cols.push(u32::try_from(col).map_err(|_| too_many())?);
                values.push(v);
                next.next();
            }
            offsets.push(u32::try_from(cols.len()).map_err(|_| too_many())?);
        }
        Ok(Self {
            owned,
            fixed,
            offsets,
            cols,
            values,
        })
    }
}

/// SGD's work for one item block: this executor's users' ratings of the block's items, in
/// a fixed shuffled order, indexed into the user and item rows they touch.
struct SgdBlock {
    /// User rows touched, ascending.
    users: Vec<u64>,
    /// Item rows touched, ascending.
    items: Vec<u64>,
    /// Per rating: index into `users`, index into `items`, centred rating.
    local_users: Vec<u32>,
    local_items: Vec<u32>,
    values: Vec<f32>,
}

impl SgdBlock {
    /// `ratings`: (user id, item id, centred rating); shuffled with `rng`.
    fn build(mut ratings: Vec<(u64, u64, f32)>, rng: &mut SplitMix64) -> Result<Self, AppError> {
        for i in (1..ratings.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            ratings.swap(i, j);
        }
        let sorted_ids = |pick: fn(&(u64, u64, f32)) -> u64| -> Vec<u64> {
            let ids: BTreeSet<u64> = ratings.iter().map(pick).collect();
            ids.into_iter().collect()
        };
        let users = sorted_ids(|r| r.0);
        let items = sorted_ids(|r| r.1);
        let index = |list: &[u64], id: u64| -> Result<u32, AppError> {
            let i = list
                .binary_search(&id)
                .map_err(|_| format!("mf: row {id} missing from an SGD block's index"))?;
            u32::try_from(i).map_err(|_| "mf: more than 2^32 rows in one SGD block".into())
        };
        let mut block = Self {
            local_users: Vec::with_capacity(ratings.len()),
            local_items: Vec::with_capacity(ratings.len()),
            values: Vec::with_capacity(ratings.len()),
            users: Vec::new(),
            items: Vec::new(),
        };
        for &(u, i, v) in &ratings {
            block.local_users.push(index(&users, u)?);
            block.local_items.push(index(&items, i)?);
            block.values.push(v);
        }
        block.users = users;
        block.items = items;
        Ok(block)
    }
}

pub struct MfExecutor {
    me: u32,
    executors: u32,
    rank: usize,
    lambda: f32,
    /// SGD's step and its work per item block (`None` for ALS).
    sgd: Option<(f32, Vec<SgdBlock>)>,
    users_table: Table<f32>,
    items_table: Table<f32>,
    users: Side,
    items: Side,
    /// Item rows the evaluation reads (those of its users' training and held-out ratings).
    eval_items: Vec<u64>,
    /// (index into `users.owned`, index into `eval_items`, centred rating).
    train_eval: Vec<(u32, u32, f32)>,
    test_eval: Vec<(u32, u32, f32)>,
    fixed_buf: Vec<f32>,
    own_buf: Vec<f32>,
    /// The GPU path (`--device cuda`); `None` computes on the CPU.
    #[cfg(feature = "cuda")]
    gpu: Option<super::gpu::MfGpu>,
}

impl MfExecutor {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        me: u32,
        executors: u32,
        config: &MfConfig,
        mean: f32,
        train: &RatingsData,
        test: &RatingsData,
        users_table: Table<f32>,
        items_table: Table<f32>,
        compute: &Compute,
    ) -> Result<Self, AppError> {
        #[cfg(not(feature = "cuda"))]
        let _ = compute;
        let mine = |id: u32| id % executors == me;
        let owned = |count: usize| -> Vec<u64> {
            (0..count as u64).filter(|&id| mine(id as u32)).collect()
        };
        let mut by_user = Vec::new();
        let mut by_item = Vec::new();
        for j in 0..train.len() {
            let (u, i, v) = (train.users[j], train.items[j], train.values[j] - mean);
            if mine(u) {
                by_user.push((u64::from(u), u64::from(i), v));
            }
            if mine(i) {
                by_item.push((u64::from(i), u64::from(u), v));
            }
        }
        let users = Side::build(owned(train.num_users()), by_user)?;
        let items = Side::build(owned(train.num_items()), by_item)?;
        let my_test: Vec<(u64, u64, f32)> = (0..test.len())
            .filter(|&j| mine(test.users[j]))
            .map(|j| {
                (
                    u64::from(test.users[j]),
                    u64::from(test.items[j]),
                    test.values[j] - mean,
                )
            })
            .collect();
        let eval_items: Vec<u64> = users
            .fixed
            .iter()
            .copied()
            .chain(my_test.iter().map(|&(_, i, _)| i))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let index = |list: &[u64], id: u64| -> Result<u32, AppError> {
            list.binary_search(&id)
                .map(|i| i as u32)
                .map_err(|_| format!("mf: row {id} missing from an executor's index").into())
        };
        let mut train_eval = Vec::with_capacity(users.cols.len());
        for (r, window) in users.offsets.windows(2).enumerate() {
            for e in window[0] as usize..window[1] as usize {
                let item = users.fixed[users.cols[e] as usize];
                train_eval.push((r as u32, index(&eval_items, item)?, users.values[e]));
            }
        }
        let mut test_eval = Vec::with_capacity(my_test.len());
        for (u, i, v) in my_test {
            test_eval.push((index(&users.owned, u)?, index(&eval_items, i)?, v));
        }
        let sgd = match config.solver {
            MfSolver::Als => None,
            MfSolver::Sgd { lr } => Some((lr, sgd_blocks(&users, me, executors, config.seed)?)),
        };
        Ok(Self {
            me,
            executors,
            rank: config.rank,
            lambda: config.lambda,
            sgd,
            users_table,
            items_table,
            users,
            items,
            eval_items,
            train_eval,
            test_eval,
            fixed_buf: Vec::new(),
            own_buf: Vec::new(),
            #[cfg(feature = "cuda")]
            gpu: match compute {
                Compute::Gpu(gpu) => Some(super::gpu::MfGpu::new(gpu.clone())),
                Compute::Cpu => None,
            },
        })
    }

    /// Solves the owned rows of `side` against the current rows of the other side and
    /// sends `new − old` for each.
    async fn solve(&mut self, users: bool, ps: &mut ParamClient) -> Result<MfOutput, AppError> {
        let (side, own_table, fixed_table) = if users {
            (&self.users, &self.users_table, &self.items_table)
        } else {
            (&self.items, &self.items_table, &self.users_table)
        };
        if side.owned.is_empty() {
            return Ok(MfOutput::Solved { rows: 0 });
        }
        ps.get_many_into(fixed_table, &side.fixed, &mut self.fixed_buf)
            .await?;
        ps.get_many_into(own_table, &side.owned, &mut self.own_buf)
            .await?;
        let csr = Csr {
            offsets: &side.offsets,
            cols: &side.cols,
            values: &side.values,
        };
        let mut new = vec![0.0f32; side.owned.len() * self.rank];
        #[cfg(feature = "cuda")]
        let solved_on_gpu = match self.gpu.as_mut() {
            Some(gpu) => {
                let kind = if users {
                    super::gpu::SideKind::Users
                } else {
                    super::gpu::SideKind::Items
                };
                new = gpu.als(kind, csr, self.rank, self.lambda, &self.fixed_buf)?;
                true
            }
            None => false,
        };
        #[cfg(not(feature = "cuda"))]
        let solved_on_gpu = false;
        if !solved_on_gpu {
            als_half_step(self.rank, self.lambda, csr, &self.fixed_buf, &mut new)?;
        }
        for (n, old) in new.iter_mut().zip(&self.own_buf) {
            *n -= old;
        }
        ps.update_many(own_table, &side.owned, &new)?;
        Ok(MfOutput::Solved {
            rows: side.owned.len() as u64,
        })
    }

    /// One SGD sub-round: this executor's ratings of the items of block
    /// `(me + sub_round) mod E`, against the current user and item rows; sends `new − old`.
    async fn sgd_block(
        &mut self,
        sub_round: u32,
        ps: &mut ParamClient,
    ) -> Result<MfOutput, AppError> {
        let Some((lr, blocks)) = &self.sgd else {
            return Err("mf: an SGD task for an executor set up for ALS".into());
        };
        let b = (self.me + sub_round) % self.executors;
        let Some(block) = blocks.get(b as usize) else {
            return Err(format!("mf: no item block {b}").into());
        };
        if block.values.is_empty() {
            return Ok(MfOutput::Solved { rows: 0 });
        }
        ps.get_many_into(&self.users_table, &block.users, &mut self.own_buf)
            .await?;
        ps.get_many_into(&self.items_table, &block.items, &mut self.fixed_buf)
            .await?;
        let mut p = self.own_buf.clone();
        let mut q = self.fixed_buf.clone();
        let ratings = Ratings {
            users: &block.local_users,
            items: &block.local_items,
            values: &block.values,
        };
        let step = Sgd {
            lr: *lr,
            lambda: self.lambda,
        };
        #[cfg(feature = "cuda")]
        if let Some(gpu) = self.gpu.as_mut() {
            gpu.sgd(b, ratings, self.rank, step, &mut p, &mut q)?;
        } else {
            sgd_step(self.rank, step, ratings, &mut p, &mut q)?;
        }
        #[cfg(not(feature = "cuda"))]
        sgd_step(self.rank, step, ratings, &mut p, &mut q)?;
        for (new, old) in p.iter_mut().zip(&self.own_buf) {
            *new -= old;
        }
        for (new, old) in q.iter_mut().zip(&self.fixed_buf) {
            *new -= old;
        }
        ps.update_many(&self.users_table, &block.users, &p)?;
        ps.update_many(&self.items_table, &block.items, &q)?;
        Ok(MfOutput::Solved {
            rows: (block.users.len() + block.items.len()) as u64,
        })
    }

    async fn eval(&mut self, ps: &mut ParamClient) -> Result<MfOutput, AppError> {
        ps.get_many_into(&self.users_table, &self.users.owned, &mut self.own_buf)
            .await?;
        ps.get_many_into(&self.items_table, &self.eval_items, &mut self.fixed_buf)
            .await?;
        let k = self.rank;
        // The indices in `train_eval`/`test_eval` point into `users.owned` and `eval_items`
        // (built together in `new`), and `get_many_into` returned `rank` values per row.
        let sse = |ratings: &[(u32, u32, f32)]| -> f64 {
            ratings
                .iter()
                .map(|&(u, i, v)| {
                    let p = &self.own_buf[u as usize * k..(u as usize + 1) * k];
                    let q = &self.fixed_buf[i as usize * k..(i as usize + 1) * k];
                    let predicted: f32 = p.iter().zip(q).map(|(a, b)| a * b).sum();
                    let e = f64::from(v - predicted);
                    e * e
                })
                .sum()
        };
        Ok(MfOutput::Eval {
            train_sse: sse(&self.train_eval),
            train_count: self.train_eval.len() as u64,
            test_sse: sse(&self.test_eval),
            test_count: self.test_eval.len() as u64,
        })
    }
}

impl Executor<super::MfApp> for MfExecutor {
    async fn run_task(&mut self, args: MfArgs, ps: &mut ParamClient) -> Result<MfOutput, AppError> {
        match args {
            MfArgs::SolveUsers { .. } => self.solve(true, ps).await,
            MfArgs::SolveItems { .. } => self.solve(false, ps).await,
            MfArgs::Eval { .. } => self.eval(ps).await,
            MfArgs::SgdBlock { sub_round, .. } => self.sgd_block(sub_round, ps).await,
        }
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        // The ratings are re-read from the dataset and the factors live on the servers:
        // nothing of its own to carry.
        Ok(Vec::new())
    }

    fn restore_state(&mut self, _state: &[u8]) -> Result<(), AppError> {
        Ok(())
    }
}

/// SGD's work of executor `me` of `executors`: its users' ratings (`users`) split by item
/// block (`item mod executors`), each block shuffled with a seed of its own.
fn sgd_blocks(users: &Side, me: u32, executors: u32, seed: u64) -> Result<Vec<SgdBlock>, AppError> {
    let mut by_block: Vec<Vec<(u64, u64, f32)>> = vec![Vec::new(); executors as usize];
    for (r, window) in users.offsets.windows(2).enumerate() {
        for e in window[0] as usize..window[1] as usize {
            let item = users.fixed[users.cols[e] as usize];
            let block = (item % u64::from(executors)) as usize;
            by_block[block].push((users.owned[r], item, users.values[e]));
        }
    }
    by_block
        .into_iter()
        .enumerate()
        .map(|(b, ratings)| {
            let mut rng = SplitMix64::new(seed ^ (u64::from(me) << 32) ^ b as u64);
            SgdBlock::build(ratings, &mut rng)
        })
        .collect()
}
