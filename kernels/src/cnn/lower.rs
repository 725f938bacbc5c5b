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
