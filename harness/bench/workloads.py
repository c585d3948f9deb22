"""What `opconform bench` times: per op, inputs at small, medium and large sizes, the bytes or
floating-point operations one call costs, and PyTorch's equivalent CPU kernel (the peer to beat).

Adding an op's benchmark is adding entries to WORKLOADS (and a torch peer when torch has one).
Inputs are drawn float32 and valid (`opconform bench --dtype` casts them); shapes follow the issue's
published sizes for the large ones.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reference._math import sigmoid
from reference.forward.activations import leaky_relu
from reference.forward.gru import gru_training
from reference.forward.lstm import lstm_training
from reference.forward.softmax import as_legacy_2d, normalize_axis


@dataclass(frozen=True)
class Workload:
    op: str
    size: str  # small, medium, large (a suffix names a variant: large-3d)
    shape: str  # shown in the table
    make: Callable[[np.random.Generator], list[np.ndarray | None]]  # the op's inputs, ONNX order
    attributes: dict = field(default_factory=dict)
    bytes: int | None = None  # memory traffic of one call with float32 data (memory-bound ops)
    fixed_bytes: int = 0  # the part of `bytes` whatever the float type: indices, masks
    flops: float | None = None  # floating-point operations of one call (ConvGrad, GRU)
    torch: Callable[[list], Callable[[], object]] | None = None  # inputs -> a call of torch's kernel

    def bytes_at(self, itemsize: int) -> int | None:
        """`bytes` with the float tensors `itemsize` bytes an element instead of float32's 4."""
        return None if self.bytes is None else (self.bytes - self.fixed_bytes) * itemsize // F32 + self.fixed_bytes


F32 = 4
ELEMENTWISE_SIZES = {"small": 4096, "medium": 256 * 1024, "large": 4 * 1024 * 1024}


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _t(*arrays):
    import torch

    def tensor(a):  # torch.from_numpy takes no ml_dtypes.bfloat16: its bits, viewed as torch's bfloat16
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    return [None if a is None else tensor(a) for a in arrays]


# ---- elementwise ------------------------------------------------------------------------------

def _second_input(op, x):
    """The op's second input from a drawn X: the forward output where the op takes Y."""
    return {"SigmoidGrad": lambda: sigmoid(x), "TanhGrad": lambda: np.tanh(x),
            "LeakyReluGrad": lambda: leaky_relu(x, alpha=0.01)}.get(op, lambda: x)().astype(np.float32)


def _torch_elementwise(op):
    import torch

    aten = torch.ops.aten
    return {
        "ReluGrad": lambda dy, x: aten.threshold_backward(dy, x, 0.0),
        "SigmoidGrad": lambda dy, y: aten.sigmoid_backward(dy, y),
        "TanhGrad": lambda dy, y: aten.tanh_backward(dy, y),
        "LeakyReluGrad": lambda dy, y: aten.leaky_relu_backward(dy, y, 0.01, True),
        "GeluGrad": lambda dy, x: aten.gelu_backward(dy, x),
        "FastGeluGrad": lambda dy, x: aten.gelu_backward(dy, x, approximate="tanh"),
        # torch has no fused bias + GELU backward: its peer adds the bias, then runs gelu_backward
        "BiasGeluGrad_dX": lambda dy, x, b: aten.gelu_backward(dy, x + b),
        "BiasFastGeluGrad_dX": lambda dy, x, b: aten.gelu_backward(dy, x + b, approximate="tanh"),
    }.get(op)  # QuickGeluGrad: no torch kernel


def _elementwise(op: str, size: str, n: int) -> Workload:
    biased = op.startswith("Bias")
    hidden = 1024 if biased else None

    def make(rng):
        x = _normal(rng, n)
        inputs = [_normal(rng, n), _second_input(op, x)]
        if biased:
            inputs = [a.reshape(-1, hidden) for a in inputs] + [_normal(rng, hidden)]
        return inputs

    def peer(inputs):
        fn = _torch_elementwise(op)
        tensors = _t(*inputs)
        return lambda: fn(*tensors)

    has_peer = op != "QuickGeluGrad"
    return Workload(op, size, f"{n // hidden}x{hidden}" if biased else str(n), make,
                    bytes=3 * n * F32, torch=peer if has_peer else None)


ELEMENTWISE_OPS = ("ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad", "QuickGeluGrad", "GeluGrad",
                   "FastGeluGrad", "BiasGeluGrad_dX", "BiasFastGeluGrad_dX")


# ---- softmax family -------------------------------------------------------------------------

def _softmax(op: str, size: str, shape: tuple[int, ...], axis: int) -> Workload:
    log = op.startswith("Log")
    legacy = not op.endswith("_13")

    def make(rng):
        x = _normal(rng, *shape).astype(np.float64)
        view = as_legacy_2d(x, axis) if legacy else x
        red = 1 if legacy else normalize_axis(axis, len(shape))
        shifted = view - view.max(axis=red, keepdims=True)
        logy = shifted - np.log(np.exp(shifted).sum(axis=red, keepdims=True))
        y = (logy if log else np.exp(logy)).reshape(shape).astype(np.float32)
        return [_normal(rng, *shape), y]

    def peer(inputs):
        import torch

        dy, y = _t(*inputs)
        dim = normalize_axis(axis, len(shape))
        if legacy:  # the legacy op reduces over everything from axis on: torch sees the 2-D view
            dy, y, dim = dy.reshape(math.prod(shape[:dim]), -1), y.reshape(math.prod(shape[:dim]), -1), 1
        fn = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
        return lambda: fn(dy, y, dim, torch.float32)

    label = "x".join(map(str, shape)) + f" axis {axis}"
    return Workload(op, size, label, make, {"axis": axis}, bytes=3 * math.prod(shape) * F32, torch=peer)


SOFTMAX_OPS = ("SoftmaxGrad", "SoftmaxGrad_13", "LogSoftmaxGrad", "LogSoftmaxGrad_13")
SOFTMAX_SIZES = (("small", (64, 128), -1), ("medium", (512, 1024), -1), ("large", (4096, 1024), -1),
                 ("large-axis1", (64, 1024, 32), 1))


# ---- ConvGrad ---------------------------------------------------------------------------------

def _conv(size: str, n: int, c: int, m: int, spatial: tuple[int, ...], k: int, pad: int, group: int = 1) -> Workload:
    dims = len(spatial)
    out = tuple(s + 2 * pad - k + 1 for s in spatial)
    attrs = {"kernel_shape": [k] * dims, "pads": [pad] * (2 * dims), "strides": [1] * dims, "group": group}
    # dX and dW are each one GEMM of 2 * N * M * (C / group) * k^d * prod(out) operations; dB is a sum
    flops = 2 * 2 * n * m * (c // group) * k ** dims * math.prod(out)

    def make(rng):
        return [_normal(rng, n, m, *out), _normal(rng, n, c, *spatial), _normal(rng, m, c // group, *([k] * dims))]

    def peer(inputs):
        import torch

        dy, x, w = _t(*inputs)
        return lambda: torch.ops.aten.convolution_backward(
            dy, x, w, [m], [1] * dims, [pad] * dims, [1] * dims, False, [0] * dims, group, [True, True, True])

    label = f"N={n} C={c} M={m} {'x'.join(map(str, spatial))} k{k} pad {pad}" + (f" group {group}" if group > 1 else "")
    return Workload("ConvGrad", size, label, make, attrs, flops=flops, torch=peer)


CONV = (
    ("small", 2, 16, 16, (32, 32), 3, 1),
    ("medium", 4, 32, 32, (28, 28), 3, 1),
    ("large", 8, 64, 64, (56, 56), 3, 1),
    ("large-1d", 8, 256, 256, (1024,), 3, 1),
    ("large-3d", 2, 32, 32, (16, 16, 16), 3, 1),
)


# ---- GRU ----------------------------------------------------------------------------------------

def _rnn_inputs(rng, gates, states, seq, batch, size, hidden):
    """X, W, R, B of a one-direction RNN with `gates` gates (GRU 3, LSTM 4), then `states` initial states."""
    scale = 1.0 / math.sqrt(hidden)
    X = _normal(rng, seq, batch, size)
    W = (_normal(rng, 1, gates * hidden, size) * scale).astype(np.float32)
    R = (_normal(rng, 1, gates * hidden, hidden) * scale).astype(np.float32)
    B = (_normal(rng, 1, 2 * gates * hidden) * scale).astype(np.float32)
    return (X, W, R, B, *[_normal(rng, 1, batch, hidden) for _ in range(states)])


def _torch_gru(inputs, seq, batch, size, hidden):
    import torch

    torch.manual_seed(0)
    gru = torch.nn.GRU(size, hidden)  # torch's GRU is ONNX's linear_before_reset = 1 form
    x = torch.from_numpy(inputs[0]).requires_grad_(True)
    h0 = torch.from_numpy(inputs[5]).requires_grad_(True)
    return gru, x, h0


def _gru(op: str, size: str, seq: int, batch: int, isize: int, hidden: int) -> Workload:
    attrs = {"hidden_size": hidden, "linear_before_reset": 1}
    # per step: X W^T and H R^T, 2 * batch * 3H * (I + H); the backward does about twice that (dX, dW, dR, dH)
    forward_flops = 2 * seq * batch * 3 * hidden * (isize + hidden)

    def make(rng):
        X, W, R, B, H0 = _rnn_inputs(rng, 3, 1, seq, batch, isize, hidden)
        if op == "GRUTraining":
            return [X, W, R, B, None, H0]
        HAll, _, ZRH = gru_training(X, W, R, B, None, H0, hidden_size=hidden, linear_before_reset=1)
        grad = _normal(rng, seq, 1, batch, hidden)
        return [X, W, R, B, None, H0, HAll.astype(np.float32), ZRH.astype(np.float32), grad, None]

    def peer(inputs):
        import torch

        gru, x, h0 = _torch_gru(inputs, seq, batch, isize, hidden)
        if op == "GRUTraining":
            return lambda: gru(x, h0)
        out, _ = gru(x, h0)
        grad = torch.from_numpy(inputs[8].reshape(seq, batch, hidden))
        wrt = [x, h0, *gru.parameters()]
        return lambda: torch.autograd.grad(out, wrt, grad, retain_graph=True)

    flops = forward_flops if op == "GRUTraining" else 2 * forward_flops
    return Workload(op, size, f"seq {seq} batch {batch} {isize}->{hidden}", make, attrs, flops=flops, torch=peer)


GRU = (("small", 8, 4, 64, 64), ("medium", 32, 16, 128, 128), ("large", 64, 32, 256, 256))


# ---- LSTM ---------------------------------------------------------------------------------------

def _lstm(op: str, size: str, seq: int, batch: int, isize: int, hidden: int) -> Workload:
    attrs = {"hidden_size": hidden}
    if op == "LSTMGrad":  # the shapes the model declares for dB and dP (B and P are no inputs)
        attrs.update(dB_shape=[1, 8 * hidden], dP_shape=[1, 3 * hidden])
    # per step: X W^T and H R^T, 2 * batch * 4H * (I + H); the backward does about twice that (dX, dW, dR, dH)
    forward_flops = 2 * seq * batch * 4 * hidden * (isize + hidden)

    def make(rng):
        X, W, R, B, H0, C0 = _rnn_inputs(rng, 4, 2, seq, batch, isize, hidden)
        if op == "LSTMTraining":
            return [X, W, R, B, None, H0, C0, None]
        HAll, _, _, CAll, IOFC = lstm_training(X, W, R, B, None, H0, C0, hidden_size=hidden)
        grad = _normal(rng, seq, 1, batch, hidden)
        return [X, W, R, None, H0, C0, HAll.astype(np.float32), CAll.astype(np.float32), IOFC.astype(np.float32),
                grad, None, None]

    def peer(inputs):  # torch.nn.LSTM: the same computation (gate order i, f, g, o; weights drawn by torch)
        import torch

        torch.manual_seed(0)
        lstm = torch.nn.LSTM(isize, hidden)
        x = torch.from_numpy(inputs[0]).requires_grad_(True)
        h0 = torch.from_numpy(inputs[5 if op == "LSTMTraining" else 4]).requires_grad_(True)
        c0 = torch.from_numpy(inputs[6 if op == "LSTMTraining" else 5]).requires_grad_(True)
        if op == "LSTMTraining":
            return lambda: lstm(x, (h0, c0))
        out, _ = lstm(x, (h0, c0))
        grad = torch.from_numpy(inputs[9].reshape(seq, batch, hidden))
        wrt = [x, h0, c0, *lstm.parameters()]
        return lambda: torch.autograd.grad(out, wrt, grad, retain_graph=True)

    flops = forward_flops if op == "LSTMTraining" else 2 * forward_flops
    return Workload(op, size, f"seq {seq} batch {batch} {isize}->{hidden}", make, attrs, flops=flops, torch=peer)


# ---- LayerNorm / RMSNorm gradients ------------------------------------------------------------

def _layer_norm(op: str, size: str, rows: int, width: int) -> Workload:
    from reference.forward.layer_norm import layer_normalization, simplified_layer_normalization

    simplified = op.startswith("Simplified")

    def make(rng):
        x, scale = _normal(rng, rows, width), (1.0 + 0.1 * _normal(rng, width)).astype(np.float32)
        if simplified:
            _, inv = simplified_layer_normalization(x, scale)
            return [_normal(rng, rows, width), x, scale, inv.astype(np.float32)]
        _, mean, inv = layer_normalization(x, scale, np.zeros(width, np.float32))
        return [_normal(rng, rows, width), x, scale, mean.astype(np.float32), inv.astype(np.float32)]

    def peer(inputs):
        import torch

        if not simplified:  # ATen's own LayerNorm backward kernel, all three gradients
            dy, x, scale, mean, inv = _t(*inputs)
            mean, inv = mean.to(x.dtype), inv.to(x.dtype)  # ATen's CPU kernel keeps a float16 X's statistics in float16
            bias = torch.zeros_like(scale)
            return lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [width], mean, inv, scale, bias,
                                                                      [True, True, True])
        # RMSNorm: torch.nn.functional.rms_norm's backward under autograd (forward built once, outside the timing)
        dy, x, scale, _ = _t(*inputs)
        x, scale = x.requires_grad_(True), scale.requires_grad_(True)
        y = torch.nn.functional.rms_norm(x, [width], scale, eps=1e-5)
        return lambda: torch.autograd.grad(y, (x, scale), dy, retain_graph=True)

    # bytes: dY and X read, X_grad written (the row-sized scale and statistics are small)
    return Workload(op, size, f"{rows}x{width} axis -1", make, {"axis": -1}, bytes=3 * rows * width * F32,
                    torch=peer)


LAYER_NORM_OPS = ("LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad")
LAYER_NORM_SIZES = (("small", 64, 128), ("medium", 1024, 1024), ("large", 8192, 1024))

# ---- DropoutGrad -------------------------------------------------------------------------------

def _dropout(size: str, rows: int, width: int, ratio: float = 0.1) -> Workload:
    def make(rng):
        mask = rng.random((rows, width)) >= ratio
        return [_normal(rng, rows, width), mask, np.array(ratio, np.float32), np.array(True)]

    def peer(inputs):
        import torch

        dy, mask = _t(*inputs[:2])
        return lambda: torch.ops.aten.native_dropout_backward(dy, mask, 1.0 / (1.0 - ratio))

    # bytes: dy read, the bool mask read (1 byte an element), dx written
    return Workload("DropoutGrad", size, f"{rows}x{width} ratio {ratio}", make, bytes=rows * width * (2 * F32 + 1),
                    fixed_bytes=rows * width, torch=peer)


DROPOUT_SIZES = (("small", 64, 128), ("medium", 1024, 1024), ("large", 8192, 1024))

# ---- BatchNormalizationGrad ----------------------------------------------------------------------

def _batch_norm(size: str, n: int, c: int, hw: int) -> Workload:
    from reference.forward.batch_norm import batch_norm_internal

    def make(rng):
        x, scale = _normal(rng, n, c, hw, hw), (1.0 + 0.1 * _normal(rng, c)).astype(np.float32)
        zeros, ones = np.zeros(c, np.float32), np.ones(c, np.float32)
        *_, mean, inv = batch_norm_internal(x, scale, zeros, zeros, ones)
        return [_normal(rng, n, c, hw, hw), x, scale, mean.astype(np.float32), inv.astype(np.float32)]

    def peer(inputs):
        import torch

        # ATen's training-mode backward from the saved mean and inverse std, all three gradients
        dy, x, scale, mean, inv = _t(*inputs)
        return lambda: torch.ops.aten.native_batch_norm_backward(dy, x, scale, None, None, mean, inv, True, 1e-5,
                                                                  [True, True, True])

    # bytes: dY and X read, X_grad written (the per-channel vectors are small)
    return Workload("BatchNormalizationGrad", size, f"N {n} C {c} {hw}x{hw}", make, {"epsilon": 1e-5},
                    bytes=3 * n * c * hw * hw * F32, torch=peer)


BATCH_NORM_SIZES = (("small", 8, 32, 28), ("medium", 32, 256, 14), ("large", 32, 64, 56))

# ---- MaxPoolGrad, AveragePoolGrad ----------------------------------------------------------------

def _max_pool(size: str, n: int, c: int, hw: int, k: int, stride: int, pad: int) -> Workload:
    from reference.forward.pool import max_pool

    geometry = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4}
    x_shape = (n, c, hw, hw)

    def make(rng):
        _, indices = max_pool(_normal(rng, *x_shape), **geometry)
        return [_normal(rng, *indices.shape), indices]

    def peer(inputs):
        import torch

        dy, indices = _t(*inputs)
        # ATen's indices count within each (n, c) plane; ONNX's over the whole tensor: converted here, untimed
        plane = torch.from_numpy(inputs[1] % (hw * hw))
        x = torch.empty(x_shape)
        return lambda: torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [k, k], [stride, stride], [pad, pad],
                                                                        [1, 1], False, plane)

    out = (hw + 2 * pad - k) // stride + 1
    # bytes: dY (4) and Indices (8) read per output element, dX written
    return Workload("MaxPoolGrad", size, f"N {n} C {c} {hw}x{hw} k{k} s{stride} p{pad}", make,
                    {"dX_shape": list(x_shape)}, bytes=n * c * (out * out * (F32 + 8) + hw * hw * F32),
                    fixed_bytes=n * c * out * out * 8, torch=peer)


def _average_pool(size: str, n: int, c: int, hw: int, k: int, stride: int) -> Workload:
    x_shape, out = (n, c, hw, hw), (hw - k) // stride + 1

    def make(rng):
        return [_normal(rng, n, c, out, out)]

    def peer(inputs):
        import torch

        (dy,) = _t(*inputs)
        x = torch.empty(x_shape)
        return lambda: torch.ops.aten.avg_pool2d_backward(dy, x, [k, k], [stride, stride], [0, 0], False, False, None)

    # bytes: dY read, dX written
    return Workload("AveragePoolGrad", size, f"N {n} C {c} {hw}x{hw} k{k} s{stride}", make,
                    {"kernel_shape": [k, k], "strides": [stride, stride], "dX_shape": list(x_shape)},
                    bytes=n * c * (out * out + hw * hw) * F32, torch=peer)


# ResNet's stem pool at batch 32 is the large one
MAX_POOL_SIZES = (("small", 4, 16, 32, 3, 2, 1), ("medium", 8, 64, 56, 3, 2, 1), ("large", 32, 64, 112, 3, 2, 1))
# 2x2 stride-2 pools, and ResNet-50's global 7x7 head
AVERAGE_POOL_SIZES = (("small", 8, 32, 28, 2, 2), ("medium", 32, 2048, 7, 7, 1), ("large", 32, 64, 112, 2, 2))

# ---- SoftmaxCrossEntropyLossGrad -----------------------------------------------------------------

def _sce(size: str, tokens: int, classes: int, ignored: float = 0.05) -> Workload:
    """A language model's loss gradient: mean over the tokens, no class weights, ~5% of labels -100 (padding)."""
    def make(rng):
        x = _normal(rng, tokens, classes)
        log_prob = (x - np.log(np.exp(x.astype(np.float64)).sum(axis=1, keepdims=True))).astype(np.float32)
        label = rng.integers(0, classes, tokens)
        label[rng.random(tokens) < ignored] = -100
        return [np.array(1.0, np.float32), log_prob, label, None]

    def peer(inputs):
        import torch

        # ATen's cross_entropy backward, its two kernels: nll_loss_backward (mean over the labels not ignored,
        # total_weight from the forward, computed outside the timing), then _log_softmax_backward_data
        dy, log_prob, label, _ = _t(*inputs)
        total = (label != -100).sum().to(torch.float32)
        aten = torch.ops.aten
        return lambda: aten._log_softmax_backward_data(
            aten.nll_loss_backward(dy, log_prob, label, None, 1, -100, total), log_prob, 1, torch.float32)

    # bytes: log_prob read, d_logits written (the labels are small)
    return Workload("SoftmaxCrossEntropyLossGrad", size, f"{tokens}x{classes} mean", make,
                    {"reduction": "mean", "ignore_index": -100}, bytes=2 * tokens * classes * F32, torch=peer)


SCE_SIZES = (("small", 64, 1000), ("medium", 1024, 1024), ("large", 8192, 1024), ("large-vocab", 1024, 32000))

# ---- GatherGrad, GatherElementsGrad ---------------------------------------------------------------

def _gather(size: str, rows: int, width: int, tokens: int) -> Workload:
    """An embedding table's gradient: `tokens` token ids (non-negative, as torch takes them) into `rows` rows."""
    def make(rng):
        return [np.array([rows, width], np.int64), rng.integers(0, rows, tokens), _normal(rng, tokens, width)]

    def peer(inputs):
        import torch

        _, indices, dy = _t(*inputs)
        return lambda: torch.ops.aten.embedding_dense_backward(dy, indices, rows, -1, False)

    # bytes: dX written, dY and the indices read
    return Workload("GatherGrad", size, f"table {rows}x{width}, {tokens} indices", make,
                    bytes=rows * width * F32 + tokens * (width * F32 + 8), fixed_bytes=tokens * 8, torch=peer)


def _gather_elements(size: str, x_shape: tuple[int, int], picks: int, axis: int) -> Workload:
    idx_shape = (x_shape[0], picks) if axis == 1 else (picks, x_shape[1])

    def make(rng):
        return [_normal(rng, *idx_shape), np.array(x_shape, np.int64), rng.integers(0, x_shape[axis], idx_shape)]

    def peer(inputs):
        import torch

        dy, _, indices = _t(*inputs)
        x = torch.empty(x_shape)
        return lambda: torch.ops.aten.gather_backward(dy, x, axis, indices, False)

    # bytes: dX written, dY and the indices read
    return Workload("GatherElementsGrad", size, f"X {x_shape[0]}x{x_shape[1]}, indices {idx_shape[0]}x{idx_shape[1]} axis {axis}",
                    make, {"axis": axis}, bytes=math.prod(x_shape) * F32 + math.prod(idx_shape) * (F32 + 8),
                    fixed_bytes=math.prod(idx_shape) * 8, torch=peer)


# the large one is a 32000-token vocabulary's 1024-wide embedding, 8192 tokens per step
GATHER_SIZES = (("small", 1000, 64, 512), ("medium", 8000, 512, 2048), ("large", 32000, 1024, 8192))
# picks along the last axis (top-k-like), and a whole tensor along axis 0
GATHER_ELEMENTS_SIZES = (("small", (256, 64), 64, 1), ("medium", (1024, 1024), 256, 1), ("large", (8192, 1024), 256, 1),
                         ("large-axis0", (4096, 1024), 4096, 0))

WORKLOADS: list[Workload] = [
    *(_elementwise(op, size, n) for op in ELEMENTWISE_OPS for size, n in ELEMENTWISE_SIZES.items()),
    *(_softmax(op, size, shape, axis) for op in SOFTMAX_OPS for size, shape, axis in SOFTMAX_SIZES),
    *(_conv(*args) for args in CONV),
    *(_gru(op, *args) for op in ("GRUTraining", "GRUGrad") for args in GRU),
    *(_lstm(op, *args) for op in ("LSTMTraining", "LSTMGrad") for args in GRU),
    *(_layer_norm(op, size, rows, width) for op in LAYER_NORM_OPS for size, rows, width in LAYER_NORM_SIZES),
    *(_dropout(size, rows, width) for size, rows, width in DROPOUT_SIZES),
    *(_batch_norm(*args) for args in BATCH_NORM_SIZES),
    *(_max_pool(*args) for args in MAX_POOL_SIZES), *(_average_pool(*args) for args in AVERAGE_POOL_SIZES),
    *(_sce(*args) for args in SCE_SIZES),
    *(_gather(*args) for args in GATHER_SIZES), *(_gather_elements(*args) for args in GATHER_ELEMENTS_SIZES),
]
