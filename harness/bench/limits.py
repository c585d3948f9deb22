"""The machine's limits, measured the way the kernels would meet them: a STREAM-style triad through
the kernel library's own OpenMP loop (GB/s counting two reads and one write per element), and sgemm
through the BLAS the kernels link (scipy-openblas32), both at the benchmark's thread count."""
from __future__ import annotations

import ctypes
import time

import numpy as np

from harness.backends import openmp_lib
from harness.core.timing import Budget, median_and_spread, repeat

TRIAD_ELEMENTS = 32 * 1024 * 1024  # 3 x 128 MB: far beyond any last-level cache
SGEMM_N = 2048


def triad_call(threads: int, n: int):
    """A call of a = b + s * c over n float32 elements (arrays written once, so no page faults are timed)."""
    lib = openmp_lib.load()
    lib.opc_triad_f32.restype = None
    lib.opc_triad_f32.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int32]
    a, b, c = (np.full(n, v, np.float32) for v in (0.0, 1.0, 2.0))
    pa, pb, pc = (x.ctypes.data for x in (a, b, c))
    return lambda: (lib.opc_triad_f32(pa, pb, pc, 3.0, n, threads), a, b, c)  # keeps the arrays alive


def triad_gbs(threads: int, budget: Budget, n: int = TRIAD_ELEMENTS) -> tuple[float, float]:
    """(GB/s at the median, spread) of a = b + s * c in float32."""
    median, spread = median_and_spread(repeat(triad_call(threads, n), budget))
    return 3 * 4 * n / median / 1e9, spread


def sgemm_gflops(threads: int, budget: Budget, n: int = SGEMM_N) -> tuple[float, float, str]:
    """(GFLOP/s at the median, spread, OpenBLAS's core) of C = A B, n x n float32, on scipy-openblas32."""
    import scipy_openblas32

    openmp_lib.load()  # loads libscipy_openblas globally
    blas = ctypes.CDLL(scipy_openblas32.get_lib_dir() + "/lib" + scipy_openblas32.get_library() + ".so")
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    c = np.zeros((n, n), np.float32)
    row_major, no_trans = 101, 111
    sgemm = blas.scipy_cblas_sgemm
    sgemm.restype = None
    args = (row_major, no_trans, no_trans, n, n, n, ctypes.c_float(1.0), a.ctypes.data, n, b.ctypes.data, n,
            ctypes.c_float(0.0), c.ctypes.data, n)
    sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                           ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
    previous = blas.scipy_openblas_get_num_threads()
    blas.scipy_openblas_set_num_threads(ctypes.c_int(threads))
    try:
        median, spread = median_and_spread(repeat(lambda: sgemm(*args), budget))
    finally:
        blas.scipy_openblas_set_num_threads(ctypes.c_int(previous))
        time.sleep(0.5)  # OpenBLAS's pool threads spin for a while after a call: let them sleep first
    blas.scipy_openblas_get_corename.restype = ctypes.c_char_p
    return 2.0 * n ** 3 / median / 1e9, spread, blas.scipy_openblas_get_corename().decode()
