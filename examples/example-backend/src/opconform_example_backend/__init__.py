"""Example opconform backend plugin: a kernel team's ReluGrad and GeluGrad, in NumPy.

It implements opconform's backend interface, version 1 (harness.backends.plugin_api): `api_version`,
`ops` (what it has kernels for: every other op and dtype is reported unsupported, not failed) and
`run(call)`. The interface is duck-typed; importing opconform is only needed for the Rejected and
Unsupported exceptions, so a plugin can stay importable without it.

ReluGrad has a deliberate bug, the kind conformance gates exist for: it passes dY through where
X >= 0 instead of X > 0, so dX is dY (not 0) at X = 0. Random inputs never hit exact zeros; the
spec's special-value cases do, and opconform's diagnosis names the bug ("matches X >= 0 selects dY").
"""
from __future__ import annotations

import math

import numpy as np

try:
    from harness.backends.plugin_api import Rejected, Unsupported
except ImportError:  # opconform not installed here: plain exceptions still count as rejections
    Rejected = Unsupported = ValueError

_erf = np.vectorize(math.erf, otypes=[np.float64])


class ExampleKernels:
    api_version = 1
    ops = {"ReluGrad": ["float32", "float64"], "GeluGrad": ["float32", "float64"]}
    thread_invariant = True  # single-threaded NumPy: the same bits at any thread count

    def environment(self) -> dict:
        return {"numpy": np.__version__}

    def run(self, call):
        dy, x = call.inputs["dY"], call.inputs["X"]
        if dy.shape != x.shape:
            raise Rejected(f"dY has shape {dy.shape} but X has shape {x.shape}")
        if dy.dtype != x.dtype:
            raise Rejected(f"dY is {dy.dtype} but X is {x.dtype}")
        if call.op == "ReluGrad":
            return {"dX": np.where(x >= 0, dy, np.zeros_like(dy))}  # BUG: the spec says X > 0
        if call.op == "GeluGrad":
            x64 = x.astype(np.float64)
            cdf = 0.5 * (1.0 + _erf(x64 / math.sqrt(2.0)))
            with np.errstate(invalid="ignore", over="ignore"):
                pdf_term = np.where(np.isinf(x64), 0.0, x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi))
            return {"dX": (dy.astype(np.float64) * (cdf + pdf_term)).astype(x.dtype)}
        raise Unsupported(f"no {call.op} kernel")
