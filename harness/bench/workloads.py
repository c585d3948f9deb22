"""What `opconform bench` times: per op, inputs at small, medium and large sizes, the bytes or
floating-point operations one call costs, and PyTorch's equivalent CPU kernel (the peer to beat).

Adding an op's benchmark is adding entries to WORKLOADS (and a torch peer when torch has one).
Inputs are float32 and valid; shapes follow the issue's published sizes for the large ones.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from reference._math import sigmoid
from reference.forward.activations import leaky_relu
from reference.forward.gru import gru_training
from reference.forward.softmax import as_legacy_2d, normalize_axis


@dataclass(frozen=True)
class Workload:
    op: str
    size: str  # small, medium, large (a suffix names a variant: large-3d)
    shape: str  # shown in the table
    make: Callable[[np.random.Generator], list[np.ndarray | None]]  # the op's inputs, ONNX order
    attributes: dict = field(default_factory=dict)
    bytes: int | None = None  # memory traffic of one call (memory-bound ops)
    flops: float | None = None  # floating-point operations of one call (ConvGrad, GRU)
    torch: Callable[[list], Callable[[], object]] | None = None  # inputs -> a call of torch's kernel


F32 = 4
ELEMENTWISE_SIZES = {"small": 4096, "medium": 256 * 1024, "large": 4 * 1024 * 1024}


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _t(*arrays):
    import torch

    return [None if a is None else torch.from_numpy(a) for a in arrays]


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

def _gru_inputs(rng, seq, batch, size, hidden):
    scale = 1.0 / math.sqrt(hidden)
    X = _normal(rng, seq, batch, size)
    W = (_normal(rng, 1, 3 * hidden, size) * scale).astype(np.float32)
    R = (_normal(rng, 1, 3 * hidden, hidden) * scale).astype(np.float32)
    B = (_normal(rng, 1, 6 * hidden) * scale).astype(np.float32)
    H0 = _normal(rng, 1, batch, hidden)
    return X, W, R, B, H0


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
        X, W, R, B, H0 = _gru_inputs(rng, seq, batch, isize, hidden)
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

WORKLOADS: list[Workload] = [
    *(_elementwise(op, size, n) for op in ELEMENTWISE_OPS for size, n in ELEMENTWISE_SIZES.items()),
    *(_softmax(op, size, shape, axis) for op in SOFTMAX_OPS for size, shape, axis in SOFTMAX_SIZES),
    *(_conv(*args) for args in CONV),
    *(_gru(op, *args) for op in ("GRUTraining", "GRUGrad") for args in GRU),
    *(_layer_norm(op, size, rows, width) for op in LAYER_NORM_OPS for size, rows, width in LAYER_NORM_SIZES),
]
