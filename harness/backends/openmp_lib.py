"""ctypes wrapper of the C/OpenMP kernel library (csrc/opconform_kernels.h).

The package's own build (scikit-build-core + CMake) installs one library per ISA level into this
package: ``libopconform_kernels_<level>.so`` for the levels in :data:`ISA_LEVELS`. The level is
chosen when the library is loaded:

- ``OPCONFORM_ISA=baseline|avx2|avx512`` forces one (baseline = x86-64 with SSE2, avx2 = x86-64-v3:
  AVX2 + FMA + F16C, avx512 = x86-64-v4: AVX-512 F/BW/CD/DQ/VL); a level the CPU lacks raises
  :class:`IsaUnavailable` with the reason (never a SIGILL);
- unset (or ``best``), the best level both the CPU and the build have.

``OPCONFORM_KERNELS_LIB`` loads another build instead: a file (its level is read from the library's
``opc_isa`` symbol before any of its code runs), or a directory of ``*_<level>.so`` files, e.g. the
AddressSanitizer builds of ``csrc/build_sanitizer.sh`` (which also need
``LD_PRELOAD=$(gcc -print-file-name=libasan.so)``, see CMakeLists.txt).

Main entry point::

    run(op, inputs, attrs, want_outputs=None, threads=1) -> list[np.ndarray | None]

``inputs`` follow the op's positional (ONNX node) order, ``None`` for an absent optional input, a Python list
(or tuple) of arrays for a sequence input (AdamWOptimizer's weights, ...: the C ABI's OPC_SEQUENCE); a sequence
output comes back as a list of arrays. Failures raise :class:`KernelError` carrying the C status code and message. The module-level
functions use the level selected above; :func:`use` switches it within a process (tests run every
level the CPU has).
"""

from __future__ import annotations

import contextlib
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
ENV_ISA = "OPCONFORM_ISA"
_LIB_MODULE = __name__.rpartition(".")[0] + ".libopconform_kernels_{isa}"
# Weakest first. What each needs of the CPU (Linux /proc/cpuinfo flag names; lzcnt shows as abm).
ISA_LEVELS = ("baseline", "avx2", "avx512")
_ISA_CPU_FLAGS = {
    "baseline": (),
    "avx2": ("avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm", "xsave"),
    "avx512": ("avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm", "xsave",
               "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
ISA_DESCRIPTIONS = {"baseline": "x86-64 (SSE2)", "avx2": "x86-64-v3 (AVX2 + FMA)",
                    "avx512": "x86-64-v4 (AVX-512)"}
MAX_RANK = 12
SEQUENCE = -2  # opc_tensor.rank of a sequence (OPC_SEQUENCE); shape -> its count, data -> its opc_tensor elements

_DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.float32): 1,
    np.dtype(np.int32): 6,
    np.dtype(np.int64): 7,
    np.dtype(np.bool_): 9,  # ONNX's codes; a kernel that takes no bool rejects it as UNSUPPORTED_DTYPE
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
        ("n_extra_dtypes", ctypes.c_int32),
        ("extra_dtypes", ctypes.POINTER(ctypes.c_int32)),
        ("n_extra_attrs", ctypes.c_int32),
        ("extra_attr_names", ctypes.POINTER(ctypes.c_char_p)),
    ]


class IsaUnavailable(RuntimeError):
    """The requested ISA level cannot run here (CPU lacks it, or no build of it exists)."""


def cpu_flags() -> set[str]:
    """The CPU feature flags the kernel reports (empty where /proc/cpuinfo is unreadable)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_isa_levels(flags: set[str] | None = None) -> list[str]:
    """The levels of ISA_LEVELS this CPU can run, weakest first (baseline always)."""
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        return ["baseline"]
    flags = cpu_flags() if flags is None else flags
    return [level for level in ISA_LEVELS if all(f in flags for f in _ISA_CPU_FLAGS[level])]


def _missing_flags(level: str) -> list[str]:
    flags = cpu_flags()
    return [f for f in _ISA_CPU_FLAGS[level] if f not in flags]


def requested_isa() -> str | None:
    """OPCONFORM_ISA's level, None when unset or 'best'; an unknown name raises IsaUnavailable."""
    value = os.environ.get(ENV_ISA, "").strip().lower()
    if value in ("", "best"):
        return None
    if value not in ISA_LEVELS:
        raise IsaUnavailable(f"{ENV_ISA}={value!r} is not a level; use one of {', '.join(ISA_LEVELS)} or best")
    return value


def check_cpu_supports(level: str) -> None:
    if level not in cpu_isa_levels():
        raise IsaUnavailable(
            f"ISA level {level} ({ISA_DESCRIPTIONS.get(level, level)}) needs CPU features this CPU lacks: "
            f"{', '.join(_missing_flags(level)) or 'unknown'} (it can run: {', '.join(cpu_isa_levels())})")


def _dir_library(directory: str, level: str) -> str | None:
    import glob

    found = sorted(glob.glob(os.path.join(directory, f"libopconform_kernels*_{level}.so")))
    return found[0] if found else None


def _package_library(level: str) -> str | None:
    spec = importlib.util.find_spec(_LIB_MODULE.format(isa=level))
    return spec.origin if spec is not None and spec.origin else None


def _override_file() -> str | None:
    """OPCONFORM_KERNELS_LIB when it names one library file (not a directory of per-level builds)."""
    override = os.environ.get(ENV_LIB)
    return override if override and not os.path.isdir(override) else None


def built_isa_levels() -> list[str]:
    """Levels with a library to load (the package's builds, or OPCONFORM_KERNELS_LIB's)."""
    if (single := _override_file()) is not None:
        return [_file_isa(single)]
    override = os.environ.get(ENV_LIB)
    find = (lambda lv: _dir_library(override, lv)) if override else _package_library
    return [level for level in ISA_LEVELS if find(level)]


def available_isa_levels() -> list[str]:
    """Levels both built and runnable on this CPU, weakest first."""
    cpu = cpu_isa_levels()
    return [level for level in built_isa_levels() if level in cpu]


def selected_isa() -> str:
    """The level module-level calls use: use()'s, else OPCONFORM_ISA's, else the best available."""
    if _current_isa is not None:
        return _current_isa
    wanted = requested_isa()
    if wanted is not None:
        return wanted
    levels = available_isa_levels()
    if not levels:
        raise FileNotFoundError(f"no kernel library is built for this CPU: reinstall the package "
                                f"(pip install -e .) or set {ENV_LIB}")
    return levels[-1]


def library_path(isa: str | None = None) -> str:
    """Path of the library that :func:`load` opens for `isa` (default: :func:`selected_isa`)."""
    if (single := _override_file()) is not None:
        return single
    override = os.environ.get(ENV_LIB)
    isa = isa or selected_isa()
    path = _dir_library(override, isa) if override else _package_library(isa)
    if path is None:
        where = f"{ENV_LIB}={override}" if override else "the package"
        raise FileNotFoundError(f"no {isa} build of the kernel library in {where}: reinstall the package "
                                f"(pip install -e .) or set {ENV_LIB}")
    return path


def _file_isa(path: str) -> str:
    """The level a library file was built for, read from its `opc_isa` data symbol (no code runs)."""
    return _open(path)[1]


_lock = threading.RLock()
_opened: dict[str, tuple[ctypes.CDLL, str]] = {}  # path -> (handle, its level), prototypes unset
_libs: dict[str, ctypes.CDLL] = {}                 # path -> checked, ready library
_current_isa: str | None = None


def _open(path: str) -> tuple[ctypes.CDLL, str]:
    with _lock:
        if path not in _opened:
            import scipy_openblas32  # noqa: F401  (loads libscipy_openblas.so RTLD_GLOBAL)

            handle = ctypes.CDLL(path)
            try:
                level = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(handle, "opc_isa"))).decode()
            except ValueError:
                level = "baseline"  # a build from before per-level libraries
            _opened[path] = (handle, level)
        return _opened[path]


def use(isa: str | None) -> None:
    """Make module-level calls use level `isa` (None: back to OPCONFORM_ISA / the best)."""
    global _current_isa
    if isa is not None and isa not in ISA_LEVELS:
        raise IsaUnavailable(f"unknown ISA level {isa!r}; use one of {', '.join(ISA_LEVELS)}")
    _current_isa = isa


def load(isa: str | None = None) -> ctypes.CDLL:
    """Open the library of level `isa` (default: selected_isa()) once per process, after checking
    that the CPU can run it (after scipy_openblas32, which provides the BLAS)."""
    with _lock:
        path = library_path(isa)
        if path in _libs:
            return _libs[path]
        if isa is None and not _override_file():
            isa = selected_isa()
        if isa is not None:  # before dlopen: nothing of a build this CPU cannot run gets mapped
            check_cpu_supports(isa)
        lib, level = _open(path)  # runs none of the library's code
        if isa is not None and level != isa:
            raise IsaUnavailable(f"{path} is a {level} build, not {isa}")
        if isa is None:  # a file named by OPCONFORM_KERNELS_LIB: its level is known only now
            check_cpu_supports(level)
        wanted = requested_isa()
        if wanted is not None and wanted != level and _current_isa is None:
            raise IsaUnavailable(f"{ENV_ISA}={wanted} but {ENV_LIB}={path} is a {level} build")
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
        lib.opc_set_force_split.restype = ctypes.c_int32
        lib.opc_set_force_split.argtypes = [ctypes.c_int32]
        lib.opc_stream_bytes.restype = ctypes.c_int64
        lib.opc_set_stream_bytes.restype = ctypes.c_int64
        lib.opc_set_stream_bytes.argtypes = [ctypes.c_int64]
        lib.opc_build_info.restype = ctypes.c_char_p
        lib.opc_abi_version.restype = ctypes.c_int32
        lib.opc_status_name.restype = ctypes.c_char_p
        lib.opc_status_name.argtypes = [ctypes.c_int32]
        if lib.opc_abi_version() != 1:
            raise RuntimeError(f"{path}: ABI version {lib.opc_abi_version()}, expected 1")
        _libs[path] = lib
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
        # accepted beyond the op's schema (the library's own tests), never offered to runs
        "extra_dtypes": [str(_CODE_DTYPES[d.extra_dtypes[i]]) for i in range(d.n_extra_dtypes)],
        "extra_attributes": [d.extra_attr_names[i].decode() for i in range(d.n_extra_attrs)],
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
    """NumPy dtype names ('float32', 'bfloat16', ...) the library computes op in, its schema's and the extra
    ones its own tests use (op_info's dtypes and extra_dtypes); [] if unknown."""
    info = op_info(op)
    return info["dtypes"] + info["extra_dtypes"] if info else []


def build_info() -> dict[str, Any]:
    """Compiler, flags, OpenMP version, BLAS and sanitizers of the loaded library, plus its path."""
    info = json.loads(load().opc_build_info().decode())
    info["path"] = library_path()
    info.setdefault("isa", selected_isa())
    info["isa_requested"] = os.environ.get(ENV_ISA) or "best"
    info["cpu_isa_levels"] = cpu_isa_levels()
    info["built_isa_levels"] = built_isa_levels()
    info["stream_bytes"] = load().opc_stream_bytes()
    return info


@contextlib.contextmanager
def force_split(enabled: bool = True):
    """Within the block, kernels split even the smallest work across their threads (opc_set_force_split):
    how a thread-invariance check exercises the split on small test cases."""
    lib = load()
    previous = lib.opc_set_force_split(int(bool(enabled)))
    try:
        yield
    finally:
        lib.opc_set_force_split(previous)


@contextlib.contextmanager
def stream_bytes(threshold: int):
    """Within the block, outputs of at least `threshold` bytes are written with non-temporal stores
    (opc_set_stream_bytes; default: the last-level cache's size): how tests run both store paths."""
    lib = load()
    previous = lib.opc_set_stream_bytes(threshold)
    try:
        yield
    finally:
        lib.opc_set_stream_bytes(previous)


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

    def _tensor(self, t: _Tensor, x: np.ndarray | Sequence[np.ndarray] | None) -> None:
        if x is None:
            t.rank, t.data, t.dtype = -1, None, 0
            return
        if isinstance(x, (list, tuple)):
            self._sequence(t, x)
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

    def _sequence(self, t: _Tensor, xs: Sequence[np.ndarray]) -> None:
        """A list of arrays as an OPC_SEQUENCE: its elements marshalled as tensors (every buffer kept alive); the
        element dtype is the first element's (float32 for an empty list); the C side checks they agree."""
        elements = (_Tensor * max(1, len(xs)))()
        for k, x in enumerate(xs):
            if x is None or isinstance(x, (list, tuple)):
                raise KernelError(2, "OPC_ERR_INVALID_ARGUMENT", f"sequence element {k} is not an array")
            self._tensor(elements[k], x)
        count = (ctypes.c_int64 * 1)(len(xs))
        self.keep += [elements, count]
        t.dtype = elements[0].dtype if xs else _DTYPE_CODES[np.dtype(np.float32)]
        t.rank, t.shape = SEQUENCE, count
        t.data = ctypes.addressof(elements)

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
                strings = (ctypes.c_char_p * len(enc))(*enc)
                self.keep += [enc, strings]
                a.kind, a.strings = ATTR_STRINGS, strings
            elif all(isinstance(v, (bool, int, np.integer)) for v in vals):
                ints = (ctypes.c_int64 * max(1, len(vals)))(*[int(v) for v in vals])
                self.keep.append(ints)
                a.kind, a.ints = ATTR_INTS, ints
            elif all(isinstance(v, (bool, int, float, np.integer, np.floating)) for v in vals):
                floats = (ctypes.c_double * len(vals))(*[float(v) for v in vals])
                self.keep.append(floats)
                a.kind, a.floats = ATTR_FLOATS, floats
            else:
                raise KernelError(5, "OPC_ERR_INVALID_ATTRIBUTE", f"attribute {name!r}: unsupported list {value!r}")
        else:
            raise KernelError(5, "OPC_ERR_INVALID_ATTRIBUTE", f"attribute {name!r}: unsupported value {value!r}")


def _raise(lib: ctypes.CDLL, status: int, err: ctypes.Array) -> None:
    raise KernelError(status, lib.opc_status_name(status).decode(), err.value.decode(errors="replace"))


def _mirrored(inputs: Sequence[Any], op: str, i: int, s: _Shape) -> list[tuple[int, ...]]:
    """The element shapes of sequence output i: those of the input sequence s.shape[0] names."""
    k = int(s.shape[0])
    src = inputs[k] if 0 <= k < len(inputs) else None
    if not isinstance(src, (list, tuple)):
        raise KernelError(9, "OPC_ERR_INTERNAL", f"{op}: output {i} mirrors input {k}, which is not a sequence")
    return [tuple(np.shape(x)) for x in src]


def infer(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None
          ) -> list[tuple[np.dtype, tuple[int, ...] | list[tuple[int, ...]]]]:
    """Output dtypes and shapes as the library computes them (raises KernelError if invalid); a sequence output's
    entry is (element dtype, [each element's shape]): a list where a tensor's is a tuple."""
    lib = load()
    call = _Call(inputs, attrs)
    n_out = _n_outputs(lib, op)
    shapes = (_Shape * max(1, n_out))()
    err = ctypes.create_string_buffer(1024)
    status = lib.opc_infer(op.encode(), call.n_in, call.inputs, call.n_attr, call.attrs, n_out, shapes,
                           err, len(err))
    if status:
        _raise(lib, status, err)
    return [(_CODE_DTYPES[s.dtype], _mirrored(inputs, op, i, s) if s.rank == SEQUENCE else tuple(s.shape[: s.rank]))
            for i, s in enumerate(shapes[:n_out])]


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
    the inferred ones (else KernelError OPC_ERR_OUTPUT_MISMATCH). A sequence output is a list of arrays (given:
    a list of writeable C-contiguous arrays, which may be the input sequence's own arrays: an in-place update).
    """
    call, arrays = prepare(op, inputs, attrs, want_outputs, threads, out)
    call()
    return arrays


def _sequence_output(call: _Call, t: _Tensor, op: str, i: int, s: _Shape, inputs: Sequence[Any],
                     given: Any) -> list[np.ndarray]:
    """Sequence output i as a list of arrays shaped like the mirrored input's elements (or the given ones), set
    into t as an OPC_SEQUENCE whose buffers `call` keeps alive."""
    shapes = _mirrored(inputs, op, i, s)
    if given is not None:
        if not isinstance(given, (list, tuple)) or not all(
                isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable for a in given):
            raise KernelError(8, "OPC_ERR_OUTPUT_MISMATCH",
                              f"{op}: out[{i}] must be a list of writeable C-contiguous numpy arrays")
        arrays = given if isinstance(given, list) else list(given)
    else:
        arrays = [np.empty(shape, dtype=_CODE_DTYPES[s.dtype]) for shape in shapes]
    elements = (_Tensor * max(1, len(arrays)))()
    for k, a in enumerate(arrays):
        dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
        call.keep += [dims, a]
        elements[k].dtype, elements[k].rank, elements[k].shape = _DTYPE_CODES.get(a.dtype, 0), a.ndim, dims
        elements[k].data = a.__array_interface__["data"][0] or ctypes.addressof(dims)
    count = (ctypes.c_int64 * 1)(len(arrays))
    call.keep += [elements, count]
    t.dtype, t.rank, t.shape, t.data = s.dtype, SEQUENCE, count, ctypes.addressof(elements)
    return arrays


def prepare(op: str, inputs: Sequence[np.ndarray | None], attrs: Mapping[str, Any] | None = None,
            want_outputs: Sequence[bool] | None = None, threads: int = 1,
            out: Sequence[np.ndarray | None] | None = None, in_place: bool = False) -> tuple[Any, list[np.ndarray | None]]:
    """(call, outputs): the marshalling of run() done once; each call() runs the C kernel into the
    same output arrays (raising KernelError on a non-OK status). Benchmarks time call() alone.
    in_place: a sequence output not given in `out` is written over the input it mirrors (the optimizers' updated
    lists over their inputs, as ORT's kernels alias them): the bench's call, never a judged one (it changes the inputs)."""
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
    arrays: list[Any] = []  # an array, a list of arrays (a sequence output) or None (not wanted)
    for i, want in enumerate(want_outputs):
        if not want:
            outs[i].rank, outs[i].data = -1, None
            arrays.append(None)
            continue
        s = shapes[i]
        given = out[i] if out is not None and i < len(out) else None
        if s.rank == SEQUENCE:
            mirrored = inputs[int(s.shape[0])] if in_place and 0 <= int(s.shape[0]) < len(inputs) else None
            if given is None and isinstance(mirrored, list) and all(
                    isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable for a in mirrored):
                given = mirrored
            arrays.append(_sequence_output(call, outs[i], op, i, s, inputs, given))
            continue
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
        call.keep += [dims, a]  # the call writes into a: keep it alive even if the caller drops the arrays
        outs[i].dtype, outs[i].rank, outs[i].shape = code, a.ndim, dims
        outs[i].data = a.__array_interface__["data"][0] or ctypes.addressof(dims)
        arrays.append(a)
    name, opc_run = op.encode(), lib.opc_run

    def run_kernel() -> None:
        status = opc_run(name, call.n_in, call.inputs, call.n_attr, call.attrs, n_out, outs, int(threads), err, len(err))
        if status:
            _raise(lib, status, err)

    return run_kernel, arrays
