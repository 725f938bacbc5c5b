//! Fast 2-D convolution: the batch is processed in chunks of samples; each chunk is
//! lowered to a matrix (see `lower`) and multiplied by the weights with one sgemm,
//! so a chunk's GEMM has `chunk · out_h · out_w` columns.
//!
//! `matrixmultiply` packs its left operand fast when it is column-major and its
//! right operand fast when it is row-major (otherwise element by element), so every
//! GEMM here is fed in those layouts: the forward pass multiplies the transposed
//! weights by the im2col matrix; the weight gradient multiplies the position-major
//! output gradient by the im2row matrix (im2col transposed); the input gradient
//! multiplies the transposed weights by the channel-major output gradient and folds
//! the result back with col2im.

use super::gemm::{sgemm, Mat};
use super::lower::{col2im_add, im2col, im2row, transpose};
use super::shape::{Conv2d, ConvDims};
use super::{CnnScratch, LayerGrads};
use crate::error::{check_len, KernelError};

/// Target size (elements) of one chunk's lowered matrix: 1 MiB of `f32`, so that it
/// stays in the L2/L3 cache between being written and being packed by the GEMM.
const CHUNK_ELEMS: usize = 1 << 18;

/// Samples per chunk: as many as fit in [`CHUNK_ELEMS`], at least 1.
fn chunk_samples(d: &ConvDims) -> usize {
    // `dims` checked that ckk · out_plane does not overflow.
    let per_sample = d.ckk * d.out_plane;
    (CHUNK_ELEMS / per_sample).clamp(1, d.batch.max(1))
}

/// Forward convolution: `y = conv(x, w) + b` (stride 1, zero padding, see [`Conv2d`]).
///
/// `x`: `batch × in_channels × in_h × in_w`; `w`: `out_channels × in_channels ×
/// kernel_h × kernel_w`; `b`: `out_channels`; `y` (overwritten):
/// `batch × out_channels × out_h × out_w`. All NCHW row-major. On error nothing is
/// written.
///
/// # Errors
/// As [`Conv2d::validate`]; [`KernelError::LengthMismatch`] if a slice does not
/// match the layer and batch.
pub fn conv2d_forward(
    layer: &Conv2d,
    batch: usize,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    y: &mut [f32],
    scratch: &mut CnnScratch,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    d.lens().check_x_w_b(x.len(), w.len(), b.len())?;
    check_len("y", d.y_len, y.len())?;
    if batch == 0 {
        return Ok(());
    }
    let ns = chunk_samples(&d);
    let np_max = ns * d.out_plane;
    let bufs = scratch.buffers([d.ckk * np_max, d.o * np_max, 0, d.w_len]);
    // Wᵀ (ckk × o) row-major is W column-major: the fast layout for a left operand.
    transpose(w, d.o, d.ckk, bufs.w_t);
    let w_cm = Mat {
        data: bufs.w_t,
        rs: 1,
        cs: d.o,
    };
    for start in (0..batch).step_by(ns) {
        let cnt = ns.min(batch - start);
        let np = cnt * d.out_plane;
        let xs = &x[start * d.x_sample..(start + cnt) * d.x_sample];
        let ys = &mut y[start * d.y_sample..(start + cnt) * d.y_sample];
        let col = &mut bufs.col[..d.ckk * np];
        im2col(&d, xs, cnt, col);
        let tmp = &mut bufs.tmp[..d.o * np];
        // tmp (o × np) = W (o × ckk) · col (ckk × np)
        sgemm(d.o, d.ckk, np, 1.0, w_cm, Mat::rows(col, np), 0.0, tmp, np)?;
        // Channel-major tmp → NCHW y, adding the bias.
        for (o, (trow, &bo)) in tmp.chunks_exact(np).zip(b).enumerate() {
            for (s, src) in trow.chunks_exact(d.out_plane).enumerate() {
                let dst = &mut ys[(s * d.o + o) * d.out_plane..][..d.out_plane];
                for (yv, &t) in dst.iter_mut().zip(src) {
                    *yv = t + bo;
                }
            }
        }
    }
    Ok(())
}

/// Backward convolution. Given the input `x`, weights `w` and the output gradient
/// `dy`, overwrites `grads.dw` (`dL/dw`, layout of `w`), `grads.db` (`dL/db`) and,
/// when present, `grads.dx` (`dL/dx`, layout of `x`). Gradients are sums over the
/// batch. On error nothing is written.
///
/// # Errors
/// As [`Conv2d::validate`]; [`KernelError::LengthMismatch`] if a slice does not
/// match the layer and batch.
pub fn conv2d_backward(
    layer: &Conv2d,
    batch: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: LayerGrads<'_>,
    scratch: &mut CnnScratch,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    let LayerGrads { mut dx, dw, db } = grads;
    d.lens().check_backward(
        [x.len(), w.len(), dy.len()],
        dx.as_deref().map(<[f32]>::len),
        [dw.len(), db.len()],
    )?;

    db.fill(0.0);
    if batch == 0 {
        dw.fill(0.0);
        if let Some(dx) = dx {
            dx.fill(0.0);
        }
        return Ok(());
    }
    let ns = chunk_samples(&d);
    let np_max = ns * d.out_plane;
    let tmp_len = if dx.is_some() { d.o * np_max } else { 0 };
    let bufs = scratch.buffers([d.ckk * np_max, tmp_len, d.o * np_max, 0]);
    for start in (0..batch).step_by(ns) {
        let cnt = ns.min(batch - start);
        let np = cnt * d.out_plane;
        let xs = &x[start * d.x_sample..(start + cnt) * d.x_sample];
        let dys = &dy[start * d.y_sample..(start + cnt) * d.y_sample];
        let col_t = &mut bufs.col[..np * d.ckk];
        im2row(&d, xs, cnt, col_t);

        // NCHW dy → position-major tmp_t (np × o), summing each channel into db.
        let tmp_t = &mut bufs.tmp_t[..np * d.o];
        for (dy_s, t_s) in dys
            .chunks_exact(d.y_sample)
            .zip(tmp_t.chunks_exact_mut(d.y_sample))
        {
            transpose(dy_s, d.o, d.out_plane, t_s);
            for (dbo, run) in db.iter_mut().zip(dy_s.chunks_exact(d.out_plane)) {
                *dbo += run.iter().sum::<f32>();
            }
        }

        // dw (o × ckk) (+)= dyᵀ (o × np) · col_t (np × ckk); tmp_t read column-major.
        let beta = if start == 0 { 0.0 } else { 1.0 };
        let dy_cm = Mat {
            data: tmp_t,
            rs: 1,
            cs: d.o,
        };
        sgemm(
            d.o,
            np,
            d.ckk,
            1.0,
            dy_cm,
            Mat::rows(col_t, d.ckk),
            beta,
            dw,
            d.ckk,
        )?;

        if let Some(dx) = dx.as_deref_mut() {
            // Channel-major copy of dy (o × np) as the right operand.
            let tmp = &mut bufs.tmp[..d.o * np];
            for (o, trow) in tmp.chunks_exact_mut(np).enumerate() {
                for (s, dst) in trow.chunks_exact_mut(d.out_plane).enumerate() {
                    dst.copy_from_slice(&dys[(s * d.o + o) * d.out_plane..][..d.out_plane]);
                }
            }
            // dcol (ckk × np) = Wᵀ (ckk × o) · dy (o × np), into the col buffer.
            let dcol = &mut bufs.col[..d.ckk * np];
            sgemm(
                d.ckk,
                d.o,
                np,
                1.0,
                Mat::transposed(w, d.ckk),
                Mat::rows(tmp, np),
                0.0,
                dcol,
                np,
            )?;
            let dxs = &mut dx[start * d.x_sample..(start + cnt) * d.x_sample];
            dxs.fill(0.0);
            col2im_add(&d, dcol, cnt, dxs);
        }
    }
    Ok(())
}
