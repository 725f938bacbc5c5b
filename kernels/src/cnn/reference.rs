//! Plain reference versions of every CNN kernel: direct loops over the defining
//! sums, accumulated in f64, no GEMM, no lowering. Slow but obviously correct; the
//! tests check the fast kernels (and the CUDA ones) against them. They validate
//! exactly like the fast kernels and return the same errors. They allocate their
//! own f64 buffers on every call.

use super::loss::validate as validate_loss;
use super::pool::check_argmax;
use super::shape::{Conv2d, Dense, MaxPool2x2};
use super::LayerGrads;
use crate::error::{check_len, KernelError};

/// Reference [`conv2d_forward`](super::conv2d_forward); same contract.
///
/// # Errors
/// As [`conv2d_forward`](super::conv2d_forward).
pub fn conv2d_forward(
    layer: &Conv2d,
    batch: usize,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    d.lens().check_x_w_b(x.len(), w.len(), b.len())?;
    check_len("y", d.y_len, y.len())?;
    for n in 0..batch {
        for o in 0..d.o {
            for oy in 0..d.oh {
                for ox in 0..d.ow {
                    let mut acc = f64::from(b[o]);
                    for c in 0..d.c {
                        for i in 0..d.kh {
                            for j in 0..d.kw {
                                if let Some(xi) = input_index(&d, n, c, oy + i, ox + j) {
                                    let wi = ((o * d.c + c) * d.kh + i) * d.kw + j;
                                    acc += f64::from(x[xi]) * f64::from(w[wi]);
                                }
                            }
                        }
                    }
                    y[((n * d.o + o) * d.oh + oy) * d.ow + ox] = acc as f32;
                }
            }
        }
    }
    Ok(())
}

/// Reference [`conv2d_backward`](super::conv2d_backward); same contract.
///
/// # Errors
/// As [`conv2d_backward`](super::conv2d_backward).
pub fn conv2d_backward(
    layer: &Conv2d,
    batch: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: LayerGrads<'_>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    let LayerGrads { dx, dw, db } = grads;
    d.lens().check_backward(
        [x.len(), w.len(), dy.len()],
        dx.as_deref().map(<[f32]>::len),
        [dw.len(), db.len()],
    )?;

    let mut gx = vec![0.0f64; d.x_len];
    let mut gw = vec![0.0f64; d.w_len];
    let mut gb = vec![0.0f64; d.o];
    for n in 0..batch {
        for o in 0..d.o {
            for oy in 0..d.oh {
                for ox in 0..d.ow {
                    let g = f64::from(dy[((n * d.o + o) * d.oh + oy) * d.ow + ox]);
                    gb[o] += g;
                    for c in 0..d.c {
                        for i in 0..d.kh {
                            for j in 0..d.kw {
                                if let Some(xi) = input_index(&d, n, c, oy + i, ox + j) {
                                    let wi = ((o * d.c + c) * d.kh + i) * d.kw + j;
                                    gw[wi] += g * f64::from(x[xi]);
                                    gx[xi] += g * f64::from(w[wi]);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    store(dw, &gw);
    store(db, &gb);
    if let Some(dx) = dx {
        store(dx, &gx);
    }
    Ok(())
}

/// Index in `x` of input `(n, c, py − pad_h, px − pad_w)` given padded coordinates
/// `(py, px)`, or `None` inside the padding.
fn input_index(
    d: &super::shape::ConvDims,
    n: usize,
    c: usize,
    py: usize,
    px: usize,
) -> Option<usize> {
    let iy = py.checked_sub(d.ph).filter(|&v| v < d.h)?;
    let ix = px.checked_sub(d.pw).filter(|&v| v < d.w)?;
    Some(((n * d.c + c) * d.h + iy) * d.w + ix)
}

/// Reference [`relu_forward`](super::relu_forward); same contract.
///
/// # Errors
/// As [`relu_forward`](super::relu_forward).
pub fn relu_forward(x: &[f32], y: &mut [f32]) -> Result<(), KernelError> {
    check_len("y", x.len(), y.len())?;
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv = if xv.is_nan() || xv > 0.0 { xv } else { 0.0 };
    }
    Ok(())
}

/// Reference [`relu_backward`](super::relu_backward); same contract.
///
/// # Errors
/// As [`relu_backward`](super::relu_backward).
pub fn relu_backward(y: &[f32], dy: &[f32], dx: &mut [f32]) -> Result<(), KernelError> {
    check_len("dy", y.len(), dy.len())?;
    check_len("dx", y.len(), dx.len())?;
    for k in 0..y.len() {
        dx[k] = if y[k] > 0.0 { dy[k] } else { 0.0 };
    }
    Ok(())
}

/// Reference [`maxpool2x2_forward`](super::maxpool2x2_forward); same contract.
///
/// # Errors
/// As [`maxpool2x2_forward`](super::maxpool2x2_forward).
pub fn maxpool2x2_forward(
    layer: &MaxPool2x2,
    batch: usize,
    x: &[f32],
    y: &mut [f32],
    argmax: &mut [u32],
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_len("x", d.x_len, x.len())?;
    check_len("y", d.y_len, y.len())?;
    check_len("argmax", d.y_len, argmax.len())?;
    let mut k = 0;
    for plane in 0..d.planes {
        for oy in 0..d.oh {
            for ox in 0..d.ow {
                // Window elements in row-major order; the first maximum wins.
                let first = 2 * oy * d.w + 2 * ox;
                let mut best = (x[plane * d.in_plane + first], first);
                for idx in [first + 1, first + d.w, first + d.w + 1] {
                    let v = x[plane * d.in_plane + idx];
                    if v > best.0 {
                        best = (v, idx);
                    }
                }
                y[k] = best.0;
                argmax[k] = best.1 as u32;
                k += 1;
            }
        }
    }
    Ok(())
}

/// Reference [`maxpool2x2_backward`](super::maxpool2x2_backward); same contract.
///
/// # Errors
/// As [`maxpool2x2_backward`](super::maxpool2x2_backward).
pub fn maxpool2x2_backward(
    layer: &MaxPool2x2,
    batch: usize,
    argmax: &[u32],
    dy: &[f32],
    dx: &mut [f32],
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_len("argmax", d.y_len, argmax.len())?;
    check_len("dy", d.y_len, dy.len())?;
    check_len("dx", d.x_len, dx.len())?;
    check_argmax(&d, argmax)?;
    let mut acc = vec![0.0f64; d.x_len];
    let out_plane = d.oh * d.ow;
    for k in 0..d.y_len {
        let plane = k / out_plane;
        acc[plane * d.in_plane + argmax[k] as usize] += f64::from(dy[k]);
    }
    store(dx, &acc);
    Ok(())
}

/// Reference [`dense_forward`](super::dense_forward); same contract.
///
/// # Errors
/// As [`dense_forward`](super::dense_forward).
pub fn dense_forward(
    layer: &Dense,
    batch: usize,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    y: &mut [f32],
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    d.lens().check_x_w_b(x.len(), w.len(), b.len())?;
    check_len("y", d.y_len, y.len())?;
    for n in 0..batch {
        for o in 0..d.o {
            let mut acc = f64::from(b[o]);
            for i in 0..d.i {
                acc += f64::from(x[n * d.i + i]) * f64::from(w[i * d.o + o]);
            }
            y[n * d.o + o] = acc as f32;
        }
    }
    Ok(())
}

/// Reference [`dense_backward`](super::dense_backward); same contract.
///
/// # Errors
/// As [`dense_backward`](super::dense_backward).
pub fn dense_backward(
    layer: &Dense,
    batch: usize,
    x: &[f32],
    w: &[f32],
    dy: &[f32],
    grads: LayerGrads<'_>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    let LayerGrads { dx, dw, db } = grads;
    d.lens().check_backward(
        [x.len(), w.len(), dy.len()],
        dx.as_deref().map(<[f32]>::len),
        [dw.len(), db.len()],
    )?;
    let mut gx = vec![0.0f64; d.x_len];
    let mut gw = vec![0.0f64; d.w_len];
    let mut gb = vec![0.0f64; d.o];
    for n in 0..batch {
        for o in 0..d.o {
            let g = f64::from(dy[n * d.o + o]);
            gb[o] += g;
            for i in 0..d.i {
                gw[i * d.o + o] += f64::from(x[n * d.i + i]) * g;
                gx[n * d.i + i] += f64::from(w[i * d.o + o]) * g;
            }
        }
    }
    store(dw, &gw);
    store(db, &gb);
    if let Some(dx) = dx {
        store(dx, &gx);
    }
    Ok(())
}

/// Reference [`softmax_xent_scaled`](super::softmax_xent_scaled); same contract
/// (`scale = 1` gives [`softmax_xent`](super::softmax_xent)).
///
/// # Errors
/// As [`softmax_xent`](super::softmax_xent).
pub fn softmax_xent_scaled(
    classes: usize,
    logits: &[f32],
    labels: &[u32],
    scale: f32,
    dlogits: &mut [f32],
) -> Result<f64, KernelError> {
    validate_loss(classes, logits, labels)?;
    check_len("dlogits", logits.len(), dlogits.len())?;
    let mut loss = 0.0;
    for (n, &label) in labels.iter().enumerate() {
        let z: Vec<f64> = logits[n * classes..(n + 1) * classes]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + z.iter().map(|&v| (v - max).exp()).sum::<f64>().ln();
        loss += lse - z[label as usize];
        for (c, &zc) in z.iter().enumerate() {
            let onehot = if c == label as usize { 1.0 } else { 0.0 };
            dlogits[n * classes + c] = (f64::from(scale) * ((zc - lse).exp() - onehot)) as f32;
        }
    }
    Ok(loss)
}

/// Reference [`softmax_xent_evaluate`](super::softmax_xent_evaluate); same contract.
///
/// # Errors
/// As [`softmax_xent_evaluate`](super::softmax_xent_evaluate).
pub fn softmax_xent_evaluate(
    classes: usize,
    logits: &[f32],
    labels: &[u32],
) -> Result<(usize, f64), KernelError> {
    validate_loss(classes, logits, labels)?;
    let mut correct = 0;
    let mut loss = 0.0;
    for (n, &label) in labels.iter().enumerate() {
        let z = &logits[n * classes..(n + 1) * classes];
        let mut best = 0;
        for c in 1..classes {
            if z[c] > z[best] || (z[best].is_nan() && !z[c].is_nan()) {
                best = c;
            }
        }
        let max = f64::from(z[best]);
        let sum: f64 = z.iter().map(|&v| (f64::from(v) - max).exp()).sum();
        loss += sum.ln() + max - f64::from(z[label as usize]);
        correct += usize::from(best == label as usize);
    }
    Ok((correct, loss))
}

/// Rounds an f64 accumulator into an f32 output of the same length.
fn store(out: &mut [f32], acc: &[f64]) {
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = a as f32;
    }
}
