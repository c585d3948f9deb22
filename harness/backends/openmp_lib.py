"""ctypes wrapper of the C/OpenMP kernel library (csrc/opconform_kernels.h).

The library is built by the package's own build (scikit-build-core + CMake) into this package as
``libopconform_kernels.so``. ``OPCONFORM_KERNELS_LIB=/path/to/lib.so`` loads another build instead,
e.g. the AddressSanitizer one from ``csrc/build_sanitizer.sh`` (which also needs
``LD_PRELOAD=$(gcc -print-file-name=libasan.so)``, see CMakeLists.txt).

Main entry point::

    run(op, inputs, attrs, want_outputs=None, threads=1) -> list[np.ndarray | None]

``inputs`` follow the op's positional (ONNX node) order, ``None`` for an absent optional input;
failures raise :class:`KernelError` carrying the C status code and message.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

ENV_LIB = "OPCONFORM_KERNELS_LIB"
_LIB_MODULE = __name__.rpartition(".")[0] + ".libopconform_kernels"
MAX_RANK = 12

_DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.float32): 1,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.float16): 10,
    np.dtype(np.float64): 11,
    np.dtype(ml_dtypes.bfloat16): 16,
}
_CODE_DTYPES = {code: dt for dt, code in _DTYPE_CODES.items()}

ATTR_INT, ATTR_FLOAT, ATTR_STRING, ATTR_INTS, ATTR_FLOATS, ATTR_STRINGS = 1, 2, 3, 4, 5, 6


class KernelError(RuntimeError):
    """A non-OK status from the C library."""

    def __init__(self, status: int, status_name: str, message: str):
        super().__init__(f"{status_name} ({status}): {message}")
        self.status = status
        self.status_name = status_name
        self.message = message


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("data", ctypes.c_void_p),
    ]


class _Attr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int32),
        ("i", ctypes.c_int64),
        ("f", ctypes.c_double),
        ("s", ctypes.c_char_p),
        ("n", ctypes.c_int64),
        ("ints", ctypes.POINTER(ctypes.c_int64)),
        ("floats", ctypes.POINTER(ctypes.c_double)),
        ("strings", ctypes.POINTER(ctypes.c_char_p)),
    ]


class _Shape(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("rank", ctypes.c_int32), ("shape", ctypes.c_int64 * MAX_RANK)]


class _OpDesc(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("n_inputs", ctypes.c_int32),
        ("input_names", ctypes.POINTER(ctypes.c_char_p)),
        ("input_optional", ctypes.POINTER(ctypes.c_uint8)),
        ("n_outputs", ctypes.c_int32),
        ("output_names", ctypes.POINTER(ctypes.c_char_p)),
        ("n_dtypes", ctypes.c_int32),
        ("dtypes", ctypes.POINTER(ctypes.c_int32)),
        ("n_attrs", ctypes.c_int32),
        ("attr_names", ctypes.POINTER(ctypes.c_char_p)),
        ("notes", ctypes.c_char_p),
    ]


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def library_path() -> str:
    """Path of the library that :func:`load` opens (env override first)."""
    override = os.environ.get(ENV_LIB)
    if override:
        return override
    spec = importlib.util.find_spec(_LIB_MODULE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"{_LIB_MODULE} is not built: reinstall the package (pip install -e .) or set {ENV_LIB}"
        )
    return spec.origin


def load() -> ctypes.CDLL:
    """Open the library once per process (after scipy_openblas32, which provides the BLAS)."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        import scipy_openblas32  # noqa: F401  (loads libscipy_openblas.so RTLD_GLOBAL)

        lib = ctypes.CDLL(library_path())
        lib.opc_op_count.restype = ctypes.c_int32
        lib.opc_op_at.restype = ctypes.POINTER(_OpDesc)
        lib.opc_op_at.argtypes = [ctypes.c_int32]
        lib.opc_find_op.restype = ctypes.POINTER(_OpDesc)
        lib.opc_find_op.argtypes = [ctypes.c_char_p]
        lib.opc_infer.restype = ctypes.c_int32
        lib.opc_infer.argtypes = [
            ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(_Tensor), ctypes.c_int32,
            ctypes.POINTER(_Attr), ctypes.c_int32, ctypes.POINTER(_Shape), ctypes.c_char_p, ctypes.c_size_t,
        ]
        lib.opc_run.restype = ctypes.c_int32
        lib.opc_run.argtypes = [
            ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(_Tensor), ctypes.c_int32,
            ctypes.POINTER(_Attr), ctypes.c_int32, ctypes.POINTER(_Tensor), ctypes.c_int32,
            ctypes.c_char_p, ctypes.c_size_t,
        ]
        lib.opc_build_info.restype = ctypes.c_char_p
        lib.opc_abi_version.restype = ctypes.c_int32
        lib.opc_status_name.restype = ctypes.c_char_p
        lib.opc_status_name.argtypes = [ctypes.c_int32]
        if lib.opc_abi_version() != 1:
            raise RuntimeError(f"{library_path()}: ABI version {lib.opc_abi_version()}, expected 1")
        _lib = lib
        return lib


# ---- queries ---------------------------------------------------------------------------------


def _desc_dict(d: _OpDesc) -> dict[str, Any]:
    return {
        "name": d.name.decode(),
        "inputs": [d.input_names[i].decode() for i in range(d.n_inputs)],
        "optional_inputs": [d.input_names[i].decode() for i in range(d.n_inputs) if d.input_optional[i]],
        "outputs": [d.output_names[i].decode() for i in range(d.n_outputs)],
        "dtypes": [str(_CODE_DTYPES[d.dtypes[i]]) for i in range(d.n_dtypes)],
        "attributes": [d.attr_names[i].decode() for i in range(d.n_attrs)],
        "notes": d.notes.decode() if d.notes else "",
    }


def ops() -> list[str]:
    """Names of every op the library implements."""
    lib = load()
    return [lib.opc_op_at(i).contents.name.decode() for i in range(lib.opc_op_count())]


def op_info(op: str) -> dict[str, Any] | None:
    """Inputs (positional), optional inputs, outputs, dtypes, attribute names and notes; None if unknown."""
    p = load().opc_find_op(op.encode())
    return _desc_dict(p.contents) if p else None


def supported_dtypes(op: str) -> list[str]:
    """NumPy dtype names ('float32', 'bfloat16', ...) the library supports for op; [] if unknown."""
    info = op_info(op)
    return info["dtypes"] if info else []


def build_info() -> dict[str, Any]:
    """Compiler, flags, OpenMP version, BLAS and sanitizers of the loaded library, plus its path."""
    info = json.loads(load().opc_build_info().decode())
    info["path"] = library_path()
    return info


# ---- marshalling -----------------------------------------------------------------------------


class _Call:
    """Keeps every ctypes buffer alive for the duration of one C call."""

    def __init__(self, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None):
        self.keep: list[Any] = []
        self.n_in = len(inputs)
        self.inputs = (_Tensor * max(1, self.n_in))()
        for i, x in enumerate(inputs):
            self._tensor(self.inputs[i], x)
        attrs = dict(attrs or {})
        self.n_attr = len(attrs)
        self.attrs = (_Attr * max(1, self.n_attr))()
        for i, (name, value) in enumerate(attrs.items()):
            self._attr(self.attrs[i], name, value)

    def _tensor(self, t: _Tensor, x: np.ndarray | None) -> None:
        if x is None:
            t.rank, t.data, t.dtype = -1, None, 0
            return
        x = np.asarray(x)
        code = _DTYPE_CODES.get(x.dtype)
        if code is None:
            raise KernelError(3, "OPC_ERR_UNSUPPORTED_DTYPE", f"numpy dtype {x.dtype} has no C dtype code")
        if not x.flags.c_contiguous:
            x = x.copy(order="C")  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        shape = (ctypes.c_int64 * max(1, x.ndim))(*x.shape)
        self.keep += [x, shape]
        t.dtype, t.rank, t.shape = code, x.ndim, shape
        t.data = x.__array_interface__["data"][0] or ctypes.addressof(shape)  # never NULL if present

    def _attr(self, a: _Attr, name: str, value: Any) -> None:
        bname = name.encode()
        self.keep.append(bname)
        a.name = bname
        if isinstance(value, (bool, int, np.integer)):
            a.kind, a.i = ATTR_INT, int(value)
        elif isinstance(value, (float, np.floating)):
            a.kind, a.f = ATTR_FLOAT, float(value)
        elif isinstance(value, (str, bytes)):
            s = value.encode() if isinstance(value, str) else value
            self.keep.append(s)
            a.kind, a.s = ATTR_STRING, s
        elif isinstance(value, (list, tuple, np.ndarray)):
            vals = list(np.asarray(value).tolist()) if isinstance(value, np.ndarray) else list(value)
            a.n = len(vals)
            if vals and all(isinstance(v, (str, bytes)) for v in vals):
                enc = [v.encode() if isinstance(v, str) else v for v in vals]
                arr = (ctypes.c_char_p * len(enc))(*enc)
                self.keep += [enc, arr]
                a.kind, a.strings = ATTR_STRINGS, arr
            elif all(isinstance(v, (bool, int, np.integer)) for v in vals):
                arr = (ctypes.c_int64 * max(1, len(vals)))(*[int(v) for v in vals])
                self.keep.append(arr)
                a.kind, a.ints = ATTR_INTS, arr
            elif all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in vals):
                arr = (ctypes.c_double * len(vals))(*[float(v) for v in vals])
                self.keep.append(arr)
                a.kind, a.floats = ATTR_FLOATS, arr
            else:
                raise KernelError(5, "OPC_ERR_INVALID_ATTRIBUTE", f"attribute {name!r}: unsupported list {value!r}")
        else:
            raise KernelError(5, "OPC_ERR_INVALID_ATTRIBUTE", f"attribute {name!r}: unsupported value {value!r}")


def _raise(lib: ctypes.CDLL, status: int, err: ctypes.Array) -> None:
    raise KernelError(status, lib.opc_status_name(status).decode(), err.value.decode(errors="replace"))


def infer(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None
          ) -> list[tuple[np.dtype, tuple[int, ...]]]:
    """Output dtypes and shapes as the library computes them (raises KernelError if invalid)."""
    lib = load()
    call = _Call(inputs, attrs)
    n_out = _n_outputs(lib, op)
    shapes = (_Shape * max(1, n_out))()
    err = ctypes.create_string_buffer(1024)
    status = lib.opc_infer(op.encode(), call.n_in, call.inputs, call.n_attr, call.attrs, n_out, shapes,
                           err, len(err))
    if status:
        _raise(lib, status, err)
    return [(_CODE_DTYPES[s.dtype], tuple(s.shape[: s.rank])) for s in shapes[:n_out]]


def _n_outputs(lib: ctypes.CDLL, op: str) -> int:
    p = lib.opc_find_op(op.encode())
    if not p:
        raise KernelError(1, "OPC_ERR_UNKNOWN_OP", f"{op}: unknown op '{op}'")
    return p.contents.n_outputs


def run(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
        want_outputs: Sequence[bool] | None = None, threads: int = 1,
        out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray | None]:
    """Run op; returns one array per output (None where not wanted). threads=0: OpenMP default.

    ``out`` may give preallocated C-contiguous output arrays (None entries are allocated), e.g. for
    benchmarks that should not time page faults of fresh allocations; their dtype and shape must be
    the inferred ones (else KernelError OPC_ERR_OUTPUT_MISMATCH).
    """
    call, arrays = prepare(op, inputs, attrs, want_outputs, threads, out)
    call()
    return arrays


def prepare(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
            want_outputs: Sequence[bool] | None = None, threads: int = 1,
            out: Sequence[np.ndarray | None] | None = None) -> tuple[Any, list[np.ndarray | None]]:
    """(call, outputs): the marshalling of run() done once; each call() runs the C kernel into the
    same output arrays (raising KernelError on a non-OK status). Benchmarks time call() alone."""
    lib = load()
    call = _Call(inputs, attrs)
    n_out = _n_outputs(lib, op)
    if want_outputs is None:
        want_outputs = [True] * n_out
    if len(want_outputs) != n_out:
        raise KernelError(2, "OPC_ERR_INVALID_ARGUMENT",
                          f"{op}: want_outputs has {len(want_outputs)} entries; the op has {n_out} outputs")
    shapes = (_Shape * max(1, n_out))()
    err = ctypes.create_string_buffer(1024)
    status = lib.opc_infer(op.encode(), call.n_in, call.inputs, call.n_attr, call.attrs, n_out, shapes,
                           err, len(err))
    if status:
        _raise(lib, status, err)
    outs = (_Tensor * max(1, n_out))()
    arrays: list[np.ndarray | None] = []
    for i, want in enumerate(want_outputs):
        if not want:
            outs[i].rank, outs[i].data = -1, None
            arrays.append(None)
            continue
        s = shapes[i]
        given = out[i] if out is not None and i < len(out) else None
        if given is not None:
            if not (isinstance(given, np.ndarray) and given.flags.c_contiguous and given.flags.writeable):
                raise KernelError(8, "OPC_ERR_OUTPUT_MISMATCH",
                                  f"{op}: out[{i}] must be a writeable C-contiguous numpy array")
            a = given
            code = _DTYPE_CODES.get(a.dtype, 0)
        else:
            a = np.empty(tuple(s.shape[: s.rank]), dtype=_CODE_DTYPES[s.dtype])
            code = s.dtype
        dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
        call.keep.append(dims)
        outs[i].dtype, outs[i].rank, outs[i].shape = code, a.ndim, dims
        outs[i].data = a.__array_interface__["data"][0] or ctypes.addressof(dims)
        arrays.append(a)
    name, opc_run = op.encode(), lib.opc_run

    def run_kernel() -> None:
        status = opc_run(name, call.n_in, call.inputs, call.n_attr, call.attrs, n_out, outs, int(threads), err, len(err))
        if status:
            _raise(lib, status, err)

    return run_kernel, arrays
