//! The reference: a plain single-threaded loop of the same MLR kernel over the same data,
//! batch and step size, evaluating on the held-out rows after every epoch as harp's MLR does.

use crate::measure::Run;
use anyhow::Result;
use harp_apps::data::Dataset;
use harp_kernels::{MlrScratch, MlrShape};
use std::time::Instant;

pub fn epochs(train: &Dataset, test: &Dataset, batch: usize, lr: f32, epochs: u32) -> Result<Run> {
    let shape = MlrShape {
        features: train.num_features,
        classes: train.num_classes.max(test.num_classes),
    };
    let params = shape.features * shape.classes;
    let (mut w, mut grad) = (vec![0f32; params], vec![0f32; params]);
    let mut scratch = MlrScratch::with_capacity(batch, shape.classes);
    let f = shape.features;
    let mut epoch_s = Vec::new();
    let mut accuracy = 0.0;
    for _ in 0..epochs {
        let start = Instant::now();
        let mut row = 0;
        while row < train.rows() {
            let end = (row + batch).min(train.rows());
            harp_kernels::gradient_scaled(
                shape,
                &train.features[row * f..end * f],
                &train.labels[row..end],
                &w,
                -lr / (end - row) as f32,
                &mut grad,
                &mut scratch,
            )?;
            harp_kernels::add_assign(&mut w, &grad)?;
            row = end;
        }
        let (correct, _) =
            harp_kernels::evaluate(shape, &test.features, &test.labels, &w, &mut scratch)?;
        accuracy = correct as f64 / test.rows() as f64;
        epoch_s.push(start.elapsed().as_secs_f64());
    }
    Ok(Run { epoch_s, accuracy })
}
