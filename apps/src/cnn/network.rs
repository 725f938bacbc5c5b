//! The CNN's shape, its parameter tensors, their seeded initial values, and one forward and
//! backward pass over a minibatch with the `harp_kernels::cnn` layer kernels.
//!
//! The network (SCAR §5.5.1: two convolutions with ReLU and max pooling, then three fully
//! connected layers) on 28×28 single-channel images:
//!
//! ```text
//! conv1 1→c1, 5×5, pad 2 → ReLU → maxpool 2×2   (28×28 → 14×14)
//! conv2 c1→c2, 5×5, pad 2 → ReLU → maxpool 2×2  (14×14 → 7×7)
//! fc1 c2·49→h1 → ReLU → fc2 h1→h2 → ReLU → fc3 h2→10
//! ```
//!
//! Ten parameter tensors (each layer's weights and bias, separately, as in SCAR), laid out
//! as the kernels want them: convolution weights `out × in × 5 × 5`, dense weights
//! `inputs × outputs` (`y = x·W + b`).

use harp::AppError;
use harp_kernels::cnn::{
    conv2d_backward, conv2d_forward, dense_backward, dense_forward, maxpool2x2_backward,
    maxpool2x2_forward, relu_backward_in_place, relu_in_place, softmax_xent_evaluate,
    softmax_xent_scaled, CnnScratch, Conv2d, Dense, LayerGrads, MaxPool2x2,
};

/// Side of the (square, single-channel) input images.
pub const IMAGE_SIDE: usize = 28;
/// Pixels per image.
pub const IMAGE_PIXELS: usize = IMAGE_SIDE * IMAGE_SIDE;
/// Output classes (digits).
pub const CLASSES: usize = 10;
/// Convolution window side.
const KERNEL: usize = 5;

/// The sizes that may be chosen: convolution channels and hidden widths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetworkShape {
    /// Output channels of the two convolutions.
    pub channels: [usize; 2],
    /// Widths of the two hidden dense layers.
    pub hidden: [usize; 2],
}

impl Default for NetworkShape {
    /// 32 and 64 channels, hidden layers of 256 and 128 (LeNet-like).
    fn default() -> Self {
        Self {
            channels: [32, 64],
            hidden: [256, 128],
        }
    }
}

/// One parameter tensor: its name, its dimensions (the first is the one a table splits
/// along) and the fan-in that scales its initial values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamTensor {
    pub name: &'static str,
    pub dims: Vec<usize>,
    pub fan_in: usize,
}

impl ParamTensor {
    /// Elements in the tensor.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Always false (every dimension is at least 1).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The validated layers of a [`NetworkShape`].
#[derive(Clone, Debug)]
pub struct Network {
    shape: NetworkShape,
    conv: [Conv2d; 2],
    pool: [MaxPool2x2; 2],
    dense: [Dense; 3],
}

/// Index of each tensor in [`Network::tensors`] (and in every per-tensor list).
const CONV1_W: usize = 0;
const CONV1_B: usize = 1;
const CONV2_W: usize = 2;
const CONV2_B: usize = 3;
const FC1_W: usize = 4;
const FC1_B: usize = 5;
const FC2_W: usize = 6;
const FC2_B: usize = 7;
const FC3_W: usize = 8;
const FC3_B: usize = 9;

/// Number of parameter tensors.
pub const TENSORS: usize = 10;

impl Network {
    /// Checks the shape (every size at least 1) and builds the layers.
    pub fn new(shape: NetworkShape) -> Result<Self, AppError> {
        let [c1, c2] = shape.channels;
        let [h1, h2] = shape.hidden;
        if [c1, c2, h1, h2].contains(&0) {
            return Err(format!(
                "cnn: channels and hidden widths must be at least 1 (got channels {c1},{c2}, hidden {h1},{h2})"
            )
            .into());
        }
        let half = IMAGE_SIDE / 2;
        let quarter = half / 2;
        let conv = [
            Conv2d::square(1, c1, IMAGE_SIDE, KERNEL, KERNEL / 2),
            Conv2d::square(c1, c2, half, KERNEL, KERNEL / 2),
        ];
        let pool = [
            MaxPool2x2 {
                channels: c1,
                in_h: IMAGE_SIDE,
                in_w: IMAGE_SIDE,
            },
            MaxPool2x2 {
                channels: c2,
                in_h: half,
                in_w: half,
            },
        ];
        let flat = c2 * quarter * quarter;
        let dense = [
            Dense {
                inputs: flat,
                outputs: h1,
            },
            Dense {
                inputs: h1,
                outputs: h2,
            },
            Dense {
                inputs: h2,
                outputs: CLASSES,
            },
        ];
        for layer in &conv {
            layer.validate().map_err(|e| format!("cnn: {e}"))?;
        }
        for layer in &pool {
            layer.validate().map_err(|e| format!("cnn: {e}"))?;
        }
        for layer in &dense {
            layer.validate().map_err(|e| format!("cnn: {e}"))?;
        }
        Ok(Self {
            shape,
            conv,
            pool,
            dense,
        })
    }

    pub fn shape(&self) -> NetworkShape {
        self.shape
    }

    /// The ten parameter tensors, in the order of the `*_W`/`*_B` indices.
    pub fn tensors(&self) -> Vec<ParamTensor> {
        let mut out = Vec::with_capacity(TENSORS);
        let conv_names = [("conv1.w", "conv1.b"), ("conv2.w", "conv2.b")];
        for (layer, (w, b)) in self.conv.iter().zip(conv_names) {
            let fan_in = layer.in_channels * layer.kernel_h * layer.kernel_w;
            out.push(ParamTensor {
                name: w,
                dims: vec![
                    layer.out_channels,
                    layer.in_channels,
                    layer.kernel_h,
                    layer.kernel_w,
                ],
                fan_in,
            });
            out.push(ParamTensor {
                name: b,
                dims: vec![layer.out_channels],
                fan_in,
            });
        }
        let dense_names = [("fc1.w", "fc1.b"), ("fc2.w", "fc2.b"), ("fc3.w", "fc3.b")];
        for (layer, (w, b)) in self.dense.iter().zip(dense_names) {
            out.push(ParamTensor {
                name: w,
                dims: vec![layer.inputs, layer.outputs],
                fan_in: layer.inputs,
            });
            out.push(ParamTensor {
                name: b,
                dims: vec![layer.outputs],
                fan_in: layer.inputs,
            });
        }
        out
    }

    /// The layers: the two convolutions, the two poolings, the three dense layers.
    pub fn layers(&self) -> (&[Conv2d; 2], &[MaxPool2x2; 2], &[Dense; 3]) {
        (&self.conv, &self.pool, &self.dense)
    }

    /// Parameters in the whole network.
    pub fn parameter_count(&self) -> usize {
        self.tensors().iter().map(ParamTensor::len).sum()
    }
}

/// The seeded initial value of every element of `tensor` (number `index` of the network):
/// uniform in `±1/√fan_in` (PyTorch's default for convolutions and linear layers), a pure
/// function of `(seed, index, element)`, so it does not depend on how tables split the
/// tensor.
pub fn initial_values(tensor: &ParamTensor, index: usize, seed: u64) -> Vec<f32> {
    let scale = 1.0 / (tensor.fan_in.max(1) as f64).sqrt();
    (0..tensor.len() as u64)
        .map(|element| {
            let h = splitmix64(
                seed ^ splitmix64((index as u64) << 40 ^ element ^ 0xC0FF_EE00_0000_0000),
            );
            // 53 random bits → [0, 1) → [-scale, scale).
            let unit = (h >> 11) as f64 / (1u64 << 53) as f64;
            ((2.0 * unit - 1.0) * scale) as f32
        })
        .collect()
}

fn splitmix64(x: u64) -> u64 {
    harp::mix64(x.wrapping_add(0x9E37_79B9_7F4A_7C15))
}

/// The buffers of one forward and backward pass, grown to the largest batch seen.
#[derive(Default)]
pub struct Passes {
    /// The batch's images, `n × 1 × 28 × 28`.
    pub input: Vec<f32>,
    /// Its labels.
    pub labels: Vec<u32>,
    conv_out: [Vec<f32>; 2],
    pooled: [Vec<f32>; 2],
    argmax: [Vec<u32>; 2],
    hidden: [Vec<f32>; 2],
    logits: Vec<f32>,
    /// Gradients flowing backwards (reused between layers of the same size class).
    d_logits: Vec<f32>,
    d_hidden: [Vec<f32>; 2],
    d_pooled: [Vec<f32>; 2],
    d_conv: [Vec<f32>; 2],
    scratch: CnnScratch,
}

/// The gradient outputs of one layer: the first `weights` and `bias` elements of its
/// (padded) gradient buffers.
fn grads_of<'a>(
    dx: Option<&'a mut [f32]>,
    dw: &'a mut [f32],
    db: &'a mut [f32],
    weights: usize,
    bias: usize,
) -> LayerGrads<'a> {
    LayerGrads {
        dx,
        dw: &mut dw[..weights],
        db: &mut db[..bias],
    }
}

fn sized<T: Copy + Default>(buf: &mut Vec<T>, len: usize) -> &mut [T] {
    buf.resize(len, T::default());
    &mut buf[..len]
}

impl Network {
    /// Forward pass over `passes.input` (`n` images) with the weights `w` (one slice per
    /// tensor); leaves the logits and every activation in `passes`.
    fn forward(&self, n: usize, w: &[&[f32]; TENSORS], p: &mut Passes) -> Result<(), AppError> {
        let k = |e: harp_kernels::KernelError| -> AppError { format!("cnn: {e}").into() };
        let Passes {
            input,
            conv_out,
            pooled,
            argmax,
            hidden,
            logits,
            scratch,
            ..
        } = p;
        let [conv1, conv2] = &self.conv;
        let [pool1, pool2] = &self.pool;
        let [a1, a2] = conv_out;
        let [p1, p2] = pooled;
        let [i1, i2] = argmax;
        let [h1, h2] = hidden;
        let [dense1, dense2, dense3] = &self.dense;

        let a1 = sized(a1, n * conv1.out_len().map_err(k)?);
        conv2d_forward(conv1, n, input, w[CONV1_W], w[CONV1_B], a1, scratch).map_err(k)?;
        relu_in_place(a1);
        let len = n * pool1.out_len().map_err(k)?;
        let p1 = sized(p1, len);
        maxpool2x2_forward(pool1, n, a1, p1, sized(i1, len)).map_err(k)?;

        let a2 = sized(a2, n * conv2.out_len().map_err(k)?);
        conv2d_forward(conv2, n, p1, w[CONV2_W], w[CONV2_B], a2, scratch).map_err(k)?;
        relu_in_place(a2);
        let len = n * pool2.out_len().map_err(k)?;
        let p2 = sized(p2, len);
        maxpool2x2_forward(pool2, n, a2, p2, sized(i2, len)).map_err(k)?;

        let h1 = sized(h1, n * dense1.outputs);
        dense_forward(dense1, n, p2, w[FC1_W], w[FC1_B], h1).map_err(k)?;
        relu_in_place(h1);
        let h2 = sized(h2, n * dense2.outputs);
        dense_forward(dense2, n, h1, w[FC2_W], w[FC2_B], h2).map_err(k)?;
        relu_in_place(h2);
        let logits = sized(logits, n * CLASSES);
        dense_forward(dense3, n, h2, w[FC3_W], w[FC3_B], logits).map_err(k)?;
        Ok(())
    }

    /// One training pass over `passes.input`/`passes.labels`: overwrites `grads` (one slice
    /// per tensor, each at least the tensor's length) with the gradient of
    /// `scale × Σ cross-entropy`, and returns (Σ cross-entropy, correct predictions).
    pub fn train_pass(
        &self,
        w: &[&[f32]; TENSORS],
        scale: f32,
        grads: &mut [Vec<f32>; TENSORS],
        p: &mut Passes,
    ) -> Result<(f64, u64), AppError> {
        let k = |e: harp_kernels::KernelError| -> AppError { format!("cnn: {e}").into() };
        let n = p.labels.len();
        self.forward(n, w, p)?;
        let Passes {
            input,
            labels,
            conv_out,
            pooled,
            argmax,
            hidden,
            logits,
            d_logits,
            d_hidden,
            d_pooled,
            d_conv,
            scratch,
        } = p;
        let (correct, _) = softmax_xent_evaluate(CLASSES, logits, labels).map_err(k)?;
        let d_logits = sized(d_logits, n * CLASSES);
        let loss = softmax_xent_scaled(CLASSES, logits, labels, scale, d_logits).map_err(k)?;
        let [g_c1w, g_c1b, g_c2w, g_c2b, g_f1w, g_f1b, g_f2w, g_f2b, g_f3w, g_f3b] = grads;
        let [dense1, dense2, dense3] = &self.dense;
        let [d_hidden1, d_hidden2] = d_hidden;
        let [d_pooled1, d_pooled2] = d_pooled;

        // fc3, fc2, fc1: each dx is the previous layer's dy, through its ReLU.
        let d_h2 = sized(d_hidden2, n * dense3.inputs);
        dense_backward(
            dense3,
            n,
            &hidden[1],
            w[FC3_W],
            d_logits,
            grads_of(
                Some(d_h2),
                g_f3w,
                g_f3b,
                dense3.inputs * dense3.outputs,
                dense3.outputs,
            ),
        )
        .map_err(k)?;
        let d_h2 = &mut d_hidden2[..n * dense3.inputs];
        relu_backward_in_place(&hidden[1], d_h2).map_err(k)?;
        let d_h1 = sized(d_hidden1, n * dense2.inputs);
        dense_backward(
            dense2,
            n,
            &hidden[0],
            w[FC2_W],
            d_h2,
            grads_of(
                Some(d_h1),
                g_f2w,
                g_f2b,
                dense2.inputs * dense2.outputs,
                dense2.outputs,
            ),
        )
        .map_err(k)?;
        let d_h1 = &mut d_hidden1[..n * dense2.inputs];
        relu_backward_in_place(&hidden[0], d_h1).map_err(k)?;
        let d_p2 = sized(d_pooled2, n * dense1.inputs);
        dense_backward(
            dense1,
            n,
            &pooled[1],
            w[FC1_W],
            d_h1,
            grads_of(
                Some(d_p2),
                g_f1w,
                g_f1b,
                dense1.inputs * dense1.outputs,
                dense1.outputs,
            ),
        )
        .map_err(k)?;

        // pool2, ReLU, conv2 (with its input gradient), then pool1, ReLU, conv1.
        let [conv1, conv2] = &self.conv;
        let [d_conv1, d_conv2] = d_conv;
        let d_a2 = sized(d_conv2, n * conv2.out_len().map_err(k)?);
        maxpool2x2_backward(&self.pool[1], n, &argmax[1], &d_pooled2[..], d_a2).map_err(k)?;
        relu_backward_in_place(&conv_out[1], d_a2).map_err(k)?;
        let d_p1 = sized(d_pooled1, n * conv2.in_len().map_err(k)?);
        let weights2 = conv2.weight_len().map_err(k)?;
        conv2d_backward(
            conv2,
            n,
            &pooled[0],
            w[CONV2_W],
            d_a2,
            grads_of(Some(d_p1), g_c2w, g_c2b, weights2, conv2.out_channels),
            scratch,
        )
        .map_err(k)?;
        let d_a1 = sized(d_conv1, n * conv1.out_len().map_err(k)?);
        maxpool2x2_backward(&self.pool[0], n, &argmax[0], &d_pooled1[..], d_a1).map_err(k)?;
        relu_backward_in_place(&conv_out[0], d_a1).map_err(k)?;
        let weights1 = conv1.weight_len().map_err(k)?;
        conv2d_backward(
            conv1,
            n,
            input,
            w[CONV1_W],
            d_a1,
            grads_of(None, g_c1w, g_c1b, weights1, conv1.out_channels),
            scratch,
        )
        .map_err(k)?;
        Ok((loss, correct as u64))
    }

    /// Forward pass only: (correct predictions, Σ cross-entropy) of `passes.input`.
    pub fn evaluate(&self, w: &[&[f32]; TENSORS], p: &mut Passes) -> Result<(u64, f64), AppError> {
        let n = p.labels.len();
        self.forward(n, w, p)?;
        let (correct, loss) = softmax_xent_evaluate(CLASSES, &p.logits, &p.labels)
            .map_err(|e| format!("cnn: {e}"))?;
        Ok((correct as u64, loss))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Network {
        Network::new(NetworkShape {
            channels: [2, 3],
            hidden: [5, 4],
        })
        .unwrap()
    }

    fn weights(net: &Network) -> Vec<Vec<f32>> {
        net.tensors()
            .iter()
            .enumerate()
            .map(|(i, t)| initial_values(t, i, 7))
            .collect()
    }

    fn passes(images: usize) -> Passes {
        Passes {
            input: (0..images * IMAGE_PIXELS)
                .map(|i| ((i * 7919) % 255) as f32 / 255.0)
                .collect(),
            labels: (0..images as u32).map(|i| (i * 3) % 10).collect(),
            ..Passes::default()
        }
    }

    fn loss(net: &Network, w: &[Vec<f32>], p: &mut Passes) -> f64 {
        let slices: [&[f32]; TENSORS] = std::array::from_fn(|i| w[i].as_slice());
        net.evaluate(&slices, p).unwrap().1
    }

    /// The backward pass wires every layer's gradient to the right tensor: each tensor's
    /// gradient matches central differences of the loss on a few of its elements.
    #[test]
    fn gradients_match_finite_differences() {
        let net = tiny();
        let mut w = weights(&net);
        let mut p = passes(3);
        let mut grads: [Vec<f32>; TENSORS] =
            std::array::from_fn(|i| vec![0.0; net.tensors()[i].len()]);
        let slices: [&[f32]; TENSORS] = std::array::from_fn(|i| w[i].as_slice());
        let (loss_sum, _) = net.train_pass(&slices, 1.0, &mut grads, &mut p).unwrap();
        assert!((loss_sum - loss(&net, &w, &mut p)).abs() < 1e-4);
        let h = 2e-3f32;
        for t in 0..TENSORS {
            // The largest-gradient elements: a clear signal for an f32 difference.
            let mut order: Vec<usize> = (0..grads[t].len()).collect();
            order.sort_by(|&a, &b| grads[t][b].abs().total_cmp(&grads[t][a].abs()));
            for &i in order.iter().take(3) {
                let keep = w[t][i];
                w[t][i] = keep + h;
                let up = loss(&net, &w, &mut p);
                w[t][i] = keep - h;
                let down = loss(&net, &w, &mut p);
                w[t][i] = keep;
                let numeric = (up - down) / (2.0 * f64::from(h));
                let analytic = f64::from(grads[t][i]);
                assert!(
                    (numeric - analytic).abs() <= 0.05 * analytic.abs().max(1e-2),
                    "tensor {t} element {i}: analytic {analytic}, numeric {numeric}"
                );
            }
        }
    }

    #[test]
    fn initial_values_are_seeded_and_bounded() {
        let net = tiny();
        let tensors = net.tensors();
        let a = initial_values(&tensors[2], 2, 1);
        assert_eq!(a, initial_values(&tensors[2], 2, 1));
        assert_ne!(a, initial_values(&tensors[2], 2, 2));
        let bound = 1.0 / (tensors[2].fan_in as f32).sqrt();
        assert!(a.iter().all(|v| v.abs() <= bound));
        assert_eq!(
            net.parameter_count(),
            tensors.iter().map(ParamTensor::len).sum::<usize>()
        );
    }

    #[test]
    fn a_zero_size_is_refused() {
        assert!(Network::new(NetworkShape {
            channels: [0, 3],
            hidden: [5, 4],
        })
        .is_err());
    }
}
