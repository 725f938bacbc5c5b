//! The CNN executor's GPU path (`--device cuda`): the same forward and backward pass as
//! [`Network::train_pass`] and [`Network::evaluate`], layer by layer with the
//! `harp_kernels::cuda::cnn` kernels on device buffers. Per task the batch and the ten
//! weight tensors go up and the ten gradients come back; activations stay on the device
//! (reallocated only when the batch size changes). The convolutions' weight gradients add
//! with atomics on the GPU, so their last bits vary from run to run (see the kernels).

use super::network::{Network, CLASSES, TENSORS};
use crate::device::buffers;
use harp::AppError;
use harp_kernels::cuda::cnn::{
    conv2d_backward, conv2d_forward, dense_backward, dense_forward, maxpool2x2_backward,
    maxpool2x2_forward, relu_backward_in_place, relu_in_place, softmax_xent_evaluate,
    softmax_xent_scaled, CnnGpuScratch, GpuLayerGrads, SOURCE,
};
use harp_kernels::cuda::cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use harp_kernels::cuda::{CudaSource, Gpu};

/// The kernels compiled when the job starts ([`crate::device::Compute::prepare`]).
pub(super) const KERNELS: [(&CudaSource, &str); 1] = [(&SOURCE, "harp_cnn_relu_inplace")];

fn gpu_error(e: harp_kernels::KernelError) -> AppError {
    format!("cnn on the GPU: {e}").into()
}

/// [`crate::device::buffers::sized`] with this module's errors.
fn sized<'a, T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &'a mut Option<CudaSlice<T>>,
    len: usize,
) -> Result<&'a mut CudaSlice<T>, AppError> {
    buffers::sized(gpu, slot, len).map_err(gpu_error)
}

/// [`crate::device::buffers::uploaded`] with this module's errors.
fn uploaded<'a, T: DeviceRepr + ValidAsZeroBits>(
    gpu: &Gpu,
    slot: &'a mut Option<CudaSlice<T>>,
    host: &[T],
) -> Result<&'a mut CudaSlice<T>, AppError> {
    buffers::uploaded(gpu, slot, host).map_err(gpu_error)
}

type Slot<T = f32> = Option<CudaSlice<T>>;

/// The device buffers of one executor.
pub(super) struct CnnGpu {
    gpu: Gpu,
    input: Slot,
    labels: Slot<u32>,
    weights: [Slot; TENSORS],
    grads: [Slot; TENSORS],
    conv_out: [Slot; 2],
    pooled: [Slot; 2],
    argmax: [Slot<u32>; 2],
    hidden: [Slot; 2],
    logits: Slot,
    d_logits: Slot,
    d_hidden: [Slot; 2],
    d_pooled: [Slot; 2],
    d_conv: [Slot; 2],
    scratch: CnnGpuScratch,
}

impl CnnGpu {
    pub(super) fn new(gpu: Gpu) -> Self {
        Self {
            gpu,
            input: None,
            labels: None,
            weights: Default::default(),
            grads: Default::default(),
            conv_out: Default::default(),
            pooled: Default::default(),
            argmax: Default::default(),
            hidden: Default::default(),
            logits: None,
            d_logits: None,
            d_hidden: Default::default(),
            d_pooled: Default::default(),
            d_conv: Default::default(),
            scratch: CnnGpuScratch::new(),
        }
    }

    /// Uploads the ten weight tensors, for the passes that follow.
    pub(super) fn set_weights(&mut self, w: &[&[f32]; TENSORS]) -> Result<(), AppError> {
        for (slot, host) in self.weights.iter_mut().zip(w) {
            uploaded(&self.gpu, slot, host)?;
        }
        Ok(())
    }

    /// Uploads the batch and runs the forward pass with the weights of the last
    /// [`Self::set_weights`]; the logits are left in `self.logits`. Returns the batch size.
    fn forward(&mut self, net: &Network, input: &[f32], labels: &[u32]) -> Result<usize, AppError> {
        let gpu = &self.gpu;
        let n = labels.len();
        let ([conv1, conv2], [pool1, pool2], [dense1, dense2, dense3]) = net.layers();
        let k = gpu_error;
        let x = uploaded(gpu, &mut self.input, input)?;
        uploaded(gpu, &mut self.labels, labels)?;
        let [Some(c1w), Some(c1b), Some(c2w), Some(c2b), Some(f1w), Some(f1b), Some(f2w), Some(f2b), Some(f3w), Some(f3b)] =
            &self.weights
        else {
            return Err("cnn on the GPU: weights not uploaded".into());
        };
        let [a1, a2] = &mut self.conv_out;
        let [p1, p2] = &mut self.pooled;
        let [i1, i2] = &mut self.argmax;
        let [h1, h2] = &mut self.hidden;

        let a1 = sized(gpu, a1, n * conv1.out_len().map_err(k)?)?;
        conv2d_forward(gpu, conv1, n, x, c1w, c1b, a1).map_err(k)?;
        relu_in_place(gpu, a1).map_err(k)?;
        let len = n * pool1.out_len().map_err(k)?;
        let p1 = sized(gpu, p1, len)?;
        maxpool2x2_forward(gpu, pool1, n, a1, p1, sized(gpu, i1, len)?).map_err(k)?;

        let a2 = sized(gpu, a2, n * conv2.out_len().map_err(k)?)?;
        conv2d_forward(gpu, conv2, n, p1, c2w, c2b, a2).map_err(k)?;
        relu_in_place(gpu, a2).map_err(k)?;
        let len = n * pool2.out_len().map_err(k)?;
        let p2 = sized(gpu, p2, len)?;
        maxpool2x2_forward(gpu, pool2, n, a2, p2, sized(gpu, i2, len)?).map_err(k)?;

        let h1 = sized(gpu, h1, n * dense1.outputs)?;
        dense_forward(gpu, dense1, n, p2, f1w, f1b, h1).map_err(k)?;
        relu_in_place(gpu, h1).map_err(k)?;
        let h2 = sized(gpu, h2, n * dense2.outputs)?;
        dense_forward(gpu, dense2, n, h1, f2w, f2b, h2).map_err(k)?;
        relu_in_place(gpu, h2).map_err(k)?;
        let logits = sized(gpu, &mut self.logits, n * CLASSES)?;
        dense_forward(gpu, dense3, n, h2, f3w, f3b, logits).map_err(k)?;
        Ok(n)
    }

    /// [`Network::evaluate`] on the GPU with the weights of the last [`Self::set_weights`]
    /// (uploaded once for all of an evaluation's chunks): (correct predictions,
    /// Σ cross-entropy).
    pub(super) fn evaluate(
        &mut self,
        net: &Network,
        input: &[f32],
        labels: &[u32],
    ) -> Result<(u64, f64), AppError> {
        self.forward(net, input, labels)?;
        let (Some(logits), Some(labels)) = (&self.logits, &self.labels) else {
            return Err("cnn on the GPU: no logits".into());
        };
        let (correct, loss) =
            softmax_xent_evaluate(&self.gpu, CLASSES, logits, labels, &mut self.scratch)
                .map_err(gpu_error)?;
        Ok((correct as u64, loss))
    }

    /// [`Network::train_pass`] on the GPU: overwrites the first elements of each of
    /// `grads` with the gradient of `scale × Σ cross-entropy`; returns (Σ cross-entropy,
    /// correct predictions).
    pub(super) fn train_pass(
        &mut self,
        net: &Network,
        w: &[&[f32]; TENSORS],
        scale: f32,
        grads: &mut [Vec<f32>; TENSORS],
        input: &[f32],
        labels: &[u32],
    ) -> Result<(f64, u64), AppError> {
        self.set_weights(w)?;
        let n = self.forward(net, input, labels)?;
        let gpu = &self.gpu;
        let k = gpu_error;
        let ([conv1, conv2], [pool1, pool2], [dense1, dense2, dense3]) = net.layers();
        let (Some(x), Some(labels), Some(logits)) = (&self.input, &self.labels, &self.logits)
        else {
            return Err("cnn on the GPU: forward pass missing".into());
        };
        let (correct, _) =
            softmax_xent_evaluate(gpu, CLASSES, logits, labels, &mut self.scratch).map_err(k)?;
        let d_logits = sized(gpu, &mut self.d_logits, n * CLASSES)?;
        let loss = softmax_xent_scaled(
            gpu,
            CLASSES,
            logits,
            labels,
            scale,
            d_logits,
            &mut self.scratch,
        )
        .map_err(k)?;
        let tensors = net.tensors();
        for (slot, tensor) in self.grads.iter_mut().zip(&tensors) {
            sized(gpu, slot, tensor.len())?;
        }
        let [Some(_), Some(_), Some(c2w), Some(_), Some(f1w), Some(_), Some(f2w), Some(_), Some(f3w), Some(_)] =
            &self.weights
        else {
            return Err("cnn on the GPU: weights not uploaded".into());
        };
        let [Some(g_c1w), Some(g_c1b), Some(g_c2w), Some(g_c2b), Some(g_f1w), Some(g_f1b), Some(g_f2w), Some(g_f2b), Some(g_f3w), Some(g_f3b)] =
            &mut self.grads
        else {
            return Err("cnn on the GPU: gradients not allocated".into());
        };
        let (
            [Some(a1), Some(a2)],
            [Some(p1), Some(p2)],
            [Some(i1), Some(i2)],
            [Some(h1), Some(h2)],
        ) = (&self.conv_out, &self.pooled, &self.argmax, &self.hidden)
        else {
            return Err("cnn on the GPU: activations missing".into());
        };
        let [d_hidden1, d_hidden2] = &mut self.d_hidden;
        let [d_pooled1, d_pooled2] = &mut self.d_pooled;
        let [d_conv1, d_conv2] = &mut self.d_conv;

        // fc3, fc2, fc1: each dx is the previous layer's dy, through its ReLU.
        let d_h2 = sized(gpu, d_hidden2, n * dense3.inputs)?;
        let grads3 = GpuLayerGrads {
            dx: Some(&mut *d_h2),
            dw: g_f3w,
            db: g_f3b,
        };
        dense_backward(gpu, dense3, n, h2, f3w, d_logits, grads3).map_err(k)?;
        relu_backward_in_place(gpu, h2, d_h2).map_err(k)?;
        let d_h1 = sized(gpu, d_hidden1, n * dense2.inputs)?;
        let grads2 = GpuLayerGrads {
            dx: Some(&mut *d_h1),
            dw: g_f2w,
            db: g_f2b,
        };
        dense_backward(gpu, dense2, n, h1, f2w, d_h2, grads2).map_err(k)?;
        relu_backward_in_place(gpu, h1, d_h1).map_err(k)?;
        let d_p2 = sized(gpu, d_pooled2, n * dense1.inputs)?;
        let grads1 = GpuLayerGrads {
            dx: Some(&mut *d_p2),
            dw: g_f1w,
            db: g_f1b,
        };
        dense_backward(gpu, dense1, n, p2, f1w, d_h1, grads1).map_err(k)?;

        // pool2, ReLU, conv2 (with its input gradient), then pool1, ReLU, conv1.
        let d_a2 = sized(gpu, d_conv2, n * conv2.out_len().map_err(k)?)?;
        maxpool2x2_backward(gpu, pool2, n, i2, d_p2, d_a2, &mut self.scratch).map_err(k)?;
        relu_backward_in_place(gpu, a2, d_a2).map_err(k)?;
        let d_p1 = sized(gpu, d_pooled1, n * conv2.in_len().map_err(k)?)?;
        let grads_c2 = GpuLayerGrads {
            dx: Some(&mut *d_p1),
            dw: g_c2w,
            db: g_c2b,
        };
        conv2d_backward(gpu, conv2, n, p1, c2w, d_a2, grads_c2).map_err(k)?;
        let d_a1 = sized(gpu, d_conv1, n * conv1.out_len().map_err(k)?)?;
        maxpool2x2_backward(gpu, pool1, n, i1, d_p1, d_a1, &mut self.scratch).map_err(k)?;
        relu_backward_in_place(gpu, a1, d_a1).map_err(k)?;
        let Some(c1w) = &self.weights[0] else {
            return Err("cnn on the GPU: weights not uploaded".into());
        };
        let grads_c1 = GpuLayerGrads {
            dx: None,
            dw: g_c1w,
            db: g_c1b,
        };
        conv2d_backward(gpu, conv1, n, x, c1w, d_a1, grads_c1).map_err(k)?;

        for ((slot, host), tensor) in self.grads.iter().zip(grads.iter_mut()).zip(&tensors) {
            let Some(dev) = slot else {
                return Err("cnn on the GPU: gradients not allocated".into());
            };
            let got = gpu.download(dev).map_err(k)?;
            if host.len() < tensor.len() {
                host.resize(tensor.len(), 0.0);
            }
            host[..tensor.len()].copy_from_slice(&got);
        }
        Ok((loss, correct as u64))
    }
}
