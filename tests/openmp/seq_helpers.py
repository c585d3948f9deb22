"""Helpers of the sequence-op tests (AdamWOptimizer, SGDOptimizerV2, InplaceClipGradNorm through opc_run with Python
lists): raw C calls whose marshalled sequences a test then corrupts (a count of -1, an element of another dtype, ...),
so that the library's own validation, not openmp_lib's, is what rejects them."""
from __future__ import annotations

import ctypes

import numpy as np

from harness.backends import openmp_lib

ERR = 1024


def copies(lst):
    return [np.array(a, copy=True) for a in lst]


def flat(lists):
    """The bytes of every array of the given lists, in order (for bitwise comparisons)."""
    return b"".join(np.ascontiguousarray(a).tobytes() for lst in lists for a in lst)


def elements(t: openmp_lib._Tensor) -> ctypes.Array:
    """The element tensors of a marshalled sequence (writeable: a test corrupts them)."""
    n = t.shape[0]
    return ctypes.cast(t.data, ctypes.POINTER(openmp_lib._Tensor * max(1, n))).contents


class Raw:
    """One op call marshalled by openmp_lib._Call (inputs) and another (outputs, as inputs of a second _Call: a
    sequence output is an OPC_SEQUENCE like an input's). `inputs[i]` / `outputs[i]` are the _Tensor structs a test
    may corrupt before infer() / run()."""

    def __init__(self, op, inputs, attrs=None, outputs=None):
        self.op = op
        self.lib = openmp_lib.load()
        self.call = openmp_lib._Call(inputs, attrs)
        self.inputs = self.call.inputs
        self.n_out = openmp_lib._n_outputs(self.lib, op)
        self.out_call = openmp_lib._Call(list(outputs) if outputs is not None else [None] * self.n_out, None)
        self.outputs = self.out_call.inputs
        self.err = ctypes.create_string_buffer(ERR)

    def infer(self):
        shapes = (openmp_lib._Shape * max(1, self.n_out))()
        status = self.lib.opc_infer(self.op.encode(), self.call.n_in, self.call.inputs, self.call.n_attr,
                                    self.call.attrs, self.n_out, shapes, self.err, ERR)
        return status, self.err.value.decode(), shapes

    def run(self, threads=1):
        status = self.lib.opc_run(self.op.encode(), self.call.n_in, self.call.inputs, self.call.n_attr,
                                  self.call.attrs, self.n_out, self.outputs, threads, self.err, ERR)
        return status, self.err.value.decode()
