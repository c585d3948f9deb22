"""ctypes bindings of the sequence-optimizer list kernels (csrc/seq_optim.h), exported directly by the C library
(not through opc_run: the op table has no sequence type). Every function updates the given NumPy arrays in place
(float32 or float64, C-contiguous, one dtype per call) and raises KernelError with the library's status and message.
Shapes are checked here (the C ABI takes one element count per list index)."""
from __future__ import annotations

import ctypes

import numpy as np

from harness.backends import openmp_lib

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_I32 = ctypes.c_int32
_D = ctypes.c_double
_ERR = 512


class KernelError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(f"status {status}: {message}")
        self.status = status
        self.message = message


def _fn(name):
    lib = openmp_lib.load()
    f = getattr(lib, name)
    if name.startswith("opc_adamw"):
        f.argtypes = [_I64, _P, _P, _P, _P, _P, _D, _I64, _D, _D, _D, _D, _I32, _I32, _I32, ctypes.c_char_p,
                      ctypes.c_size_t]
    elif name.startswith("opc_sgd_v2"):
        f.argtypes = [_I64, _P, _P, _P, _D, _I32, ctypes.c_char_p, ctypes.c_size_t]
    else:
        f.argtypes = [_I64, _P, _P, _D, ctypes.c_char_p, ctypes.POINTER(_D), _I32, ctypes.c_char_p, ctypes.c_size_t]
    f.restype = _I32
    return f


def _suffix(lists):
    dts = {a.dtype for lst in lists if lst is not None for a in lst if a is not None}
    if len(dts) > 1:
        raise TypeError(f"mixed dtypes {sorted(str(d) for d in dts)}")
    dt = dts.pop() if dts else np.dtype(np.float32)
    if dt == np.float32:
        return "f32"
    if dt == np.float64:
        return "f64"
    raise TypeError(f"dtype {dt} is not supported (float32, float64)")


def _ptrs(lst, count=None):
    """An array of data pointers (None: a NULL array; count: length when lst is shorter, padded with NULL)."""
    if lst is None:
        return None
    n = len(lst) if count is None else count
    arr = (ctypes.c_void_p * max(n, 1))()
    for i, a in enumerate(lst[:n]):
        if a is not None:
            assert a.flags.c_contiguous and a.flags.writeable
            arr[i] = a.ctypes.data
    return arr


def _sizes(ref_list, sizes=None):
    s = [int(a.size) for a in (ref_list or [])] if sizes is None else list(sizes)
    return (ctypes.c_int64 * max(len(s), 1))(*s), len(s)


def _check(status, err):
    if status != 0:
        raise KernelError(status, err.value.decode())


def _same_shapes(first, others):
    for name, lst in others:
        if len(lst) != len(first[1]):
            raise ValueError(f"{name} has {len(lst)} tensors, {first[0]} has {len(first[1])}")
        for i, (a, b) in enumerate(zip(first[1], lst)):
            if a.shape != b.shape:
                raise ValueError(f"{name}[{i}] has shape {list(b.shape)}, {first[0]}[{i}] has {list(a.shape)}")


def adamw(weights, gradients, m1, m2, *, lr, step, alpha=0.9, beta=0.999, epsilon=1e-8, weight_decay=0.01,
          correct_bias=1, adam_mode=0, threads=1, sizes=None, count=None, check_shapes=True):
    if check_shapes:
        _same_shapes(("weights", weights), [("gradients", gradients), ("momentums_1", m1), ("momentums_2", m2)])
    suf = _suffix([weights, gradients, m1, m2])
    sz, n = _sizes(weights, sizes)
    n = n if count is None else count
    err = ctypes.create_string_buffer(_ERR)
    _check(_fn(f"opc_adamw_{suf}")(n, sz, _ptrs(weights, n), _ptrs(gradients, n), _ptrs(m1, n), _ptrs(m2, n),
                                   float(lr), int(step), float(alpha), float(beta), float(epsilon),
                                   float(weight_decay), int(correct_bias), int(adam_mode), int(threads), err, _ERR),
           err)


def sgd_v2(weights, gradients, *, lr, threads=1, sizes=None, count=None, check_shapes=True):
    if check_shapes:
        _same_shapes(("weights", weights), [("gradients", gradients)])
    suf = _suffix([weights, gradients])
    sz, n = _sizes(weights, sizes)
    n = n if count is None else count
    err = ctypes.create_string_buffer(_ERR)
    _check(_fn(f"opc_sgd_v2_{suf}")(n, sz, _ptrs(weights, n), _ptrs(gradients, n), float(lr), int(threads), err,
                                    _ERR), err)


def clip_grad_norm(gradients, *, max_norm=1.0, norm_type="fro", threads=1, sizes=None, count=None):
    """Returns the joint L2 norm the kernel computed."""
    suf = _suffix([gradients])
    sz, n = _sizes(gradients, sizes)
    n = n if count is None else count
    err = ctypes.create_string_buffer(_ERR)
    norm = _D(-1.0)
    nt = None if norm_type is None else norm_type.encode()
    _check(_fn(f"opc_clip_grad_norm_{suf}")(n, sz, _ptrs(gradients, n), float(max_norm), nt, ctypes.byref(norm),
                                            int(threads), err, _ERR), err)
    return norm.value
