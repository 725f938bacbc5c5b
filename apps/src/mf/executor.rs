//! The MF executor: the users and items it owns, their centred training ratings in
//! compressed-row form both ways, and its users' held-out ratings.

use super::{MfArgs, MfConfig, MfOutput};
use crate::data::RatingsData;
use harp::{AppError, Executor, ParamClient, Table};
use harp_kernels::mf::{als_half_step, Csr};
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

pub struct MfExecutor {
    rank: usize,
    lambda: f32,
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
    ) -> Result<Self, AppError> {
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
        Ok(Self {
            rank: config.rank,
            lambda: config.lambda,
            users_table,
            items_table,
            users,
            items,
            eval_items,
            train_eval,
            test_eval,
            fixed_buf: Vec::new(),
            own_buf: Vec::new(),
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
        let mut new = vec![0.0f32; side.owned.len() * self.rank];
        let csr = Csr {
            offsets: &side.offsets,
            cols: &side.cols,
            values: &side.values,
        };
        als_half_step(self.rank, self.lambda, csr, &self.fixed_buf, &mut new)?;
        for (n, old) in new.iter_mut().zip(&self.own_buf) {
            *n -= old;
        }
        ps.update_many(own_table, &side.owned, &new)?;
        Ok(MfOutput::Solved {
            rows: side.owned.len() as u64,
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
