//! Lowering between NCHW activations and the convolution's im2col matrix.
//!
//! For a chunk of `ns` samples, the lowered matrix `col` is `ckk × (ns · P)`
//! row-major, where `ckk = C·kh·kw` and `P = oh·ow`: row `q = (c·kh + i)·kw + j`,
//! column `s·P + oy·ow + ox` holds input element `(s, c, oy + i − ph, ox + j − pw)`,
//! or 0 where that falls into the padding. Both directions copy contiguous row
//! segments, so the inner loops are `memcpy`/vector adds.

use super::shape::ConvDims;

/// The output columns `ox` whose input column `ox + j − pw` is inside the image:
/// `lo..hi` (empty when none is), with the input column of `lo` (meaningful only
/// when the range is not empty).
#[inline]
fn valid_cols(d: &ConvDims, j: usize) -> (usize, usize, usize) {
    let lo = d.pw.saturating_sub(j).min(d.ow);
    let hi = (d.w + d.pw).saturating_sub(j).min(d.ow).max(lo);
    // When lo < hi, lo >= pw - j, so lo + j - pw does not underflow.
    let src = if lo < hi { lo + j - d.pw } else { 0 };
    (lo, hi, src)
}

/// Fills `col` (exactly `ckk · ns · P` long) from `x` (exactly `ns` samples).
pub(crate) fn im2col(d: &ConvDims, x: &[f32], ns: usize, col: &mut [f32]) {
    let np = ns * d.out_plane;
    let mut rows = col.chunks_exact_mut(np);
    for c in 0..d.c {
        for i in 0..d.kh {
            for j in 0..d.kw {
                let Some(row) = rows.next() else { return };
                let (lo, hi, src) = valid_cols(d, j);
                for (s, dst_plane) in row.chunks_exact_mut(d.out_plane).enumerate() {
                    let plane = &x[(s * d.c + c) * d.in_plane..][..d.in_plane];
                    for (oy, dst) in dst_plane.chunks_exact_mut(d.ow).enumerate() {
                        let iy = oy + i;
                        if iy < d.ph || iy - d.ph >= d.h || lo == hi {
                            dst.fill(0.0);
                            continue;
                        }
                        let line = &plane[(iy - d.ph) * d.w..][..d.w];
                        dst[..lo].fill(0.0);
                        dst[lo..hi].copy_from_slice(&line[src..src + (hi - lo)]);
                        dst[hi..].fill(0.0);
                    }
                }
            }
        }
    }
}

/// Adds the lowered gradient `col` back onto `dx` (exactly `ns` samples; the
/// caller zeroes it first): the adjoint of [`im2col`].
pub(crate) fn col2im_add(d: &ConvDims, col: &[f32], ns: usize, dx: &mut [f32]) {
    let np = ns * d.out_plane;
    let mut rows = col.chunks_exact(np);
    for c in 0..d.c {
        for i in 0..d.kh {
            for j in 0..d.kw {
                let Some(row) = rows.next() else { return };
                let (lo, hi, src) = valid_cols(d, j);
                if lo == hi {
                    continue;
                }
                for (s, src_plane) in row.chunks_exact(d.out_plane).enumerate() {
                    let plane = &mut dx[(s * d.c + c) * d.in_plane..][..d.in_plane];
                    for (oy, g) in src_plane.chunks_exact(d.ow).enumerate() {
                        let iy = oy + i;
                        if iy < d.ph || iy - d.ph >= d.h {
                            continue;
                        }
                        let line = &mut plane[(iy - d.ph) * d.w..][..d.w];
                        for (acc, &v) in line[src..src + (hi - lo)].iter_mut().zip(&g[lo..hi]) {
                            *acc += v;
                        }
                    }
                }
            }
        }
    }
}

/// Fills `colt` (exactly `ns · P × ckk`, row-major) from `x` (exactly `ns`
/// samples): the transpose of [`im2col`]'s matrix, built directly. Row
/// `s·P + oy·ow + ox` is the receptive field of that output position; for each
/// `(c, i)` it holds the `kw` input elements `(c, oy + i − ph, ox − pw ..)`, a
/// contiguous run. Common kernel widths get fixed-size copies.
pub(crate) fn im2row(d: &ConvDims, x: &[f32], ns: usize, colt: &mut [f32]) {
    match d.kw {
        3 => im2row_kw::<3>(d, x, ns, colt),
        5 => im2row_kw::<5>(d, x, ns, colt),
        _ => im2row_kw::<0>(d, x, ns, colt),
    }
}

/// [`im2row`] for kernel width `KW` (`KW == 0`: any width, taken from `d`).
#[inline(always)]
fn im2row_kw<const KW: usize>(d: &ConvDims, x: &[f32], ns: usize, colt: &mut [f32]) {
    let kw = if KW == 0 { d.kw } else { KW };
    let row_block = d.ow * d.ckk;
    // Output columns whose whole window is inside the input: ox - pw >= 0 and
    // ox - pw + kw <= w.
    let inner_lo = d.pw.min(d.ow);
    let inner_hi = (d.w + d.pw + 1).saturating_sub(kw).min(d.ow).max(inner_lo);
    for (s, sample) in colt
        .chunks_exact_mut(d.out_plane * d.ckk)
        .take(ns)
        .enumerate()
    {
        for c in 0..d.c {
            let plane = &x[(s * d.c + c) * d.in_plane..][..d.in_plane];
            for i in 0..d.kh {
                let q = (c * d.kh + i) * kw;
                for (oy, rows) in sample.chunks_exact_mut(row_block).enumerate() {
                    let mut rows = rows.chunks_exact_mut(d.ckk).map(|row| &mut row[q..q + kw]);
                    let iy = oy + i;
                    if iy < d.ph || iy - d.ph >= d.h {
                        for dst in rows {
                            dst.fill(0.0);
                        }
                        continue;
                    }
                    let line = &plane[(iy - d.ph) * d.w..][..d.w];
                    for (ox, dst) in rows.by_ref().enumerate().take(inner_lo) {
                        window_clipped(d, line, ox, dst);
                    }
                    let inner = inner_hi - inner_lo;
                    // Window of column inner_lo starts at input column inner_lo - pw = 0.
                    let windows = line.windows(kw);
                    for (dst, win) in rows.by_ref().take(inner).zip(windows) {
                        if KW == 0 {
                            dst.copy_from_slice(win);
                        } else if let (Ok(dst), Ok(win)) =
                            (<&mut [f32; KW]>::try_from(dst), <&[f32; KW]>::try_from(win))
                        {
                            *dst = *win;
                        }
                    }
                    for (ox, dst) in rows.enumerate() {
                        window_clipped(d, line, inner_hi + ox, dst);
                    }
                }
            }
        }
    }
}

/// One receptive-field run at output column `ox` that may overlap the padding.
fn window_clipped(d: &ConvDims, line: &[f32], ox: usize, dst: &mut [f32]) {
    for (j, v) in dst.iter_mut().enumerate() {
        *v = (ox + j)
            .checked_sub(d.pw)
            .and_then(|ix| line.get(ix))
            .copied()
            .unwrap_or(0.0);
    }
}

/// `dst = srcᵀ` for a `rows × cols` row-major `src` (so `dst` is `cols × rows`),
/// in square tiles so both sides stay in cache. Both are exactly `rows · cols` long.
pub(crate) fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    const T: usize = 16;
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                let line = &src[r * cols..][..cols];
                for c in c0..(c0 + T).min(cols) {
                    dst[c * rows + r] = line[c];
                }
            }
        }
    }
}
