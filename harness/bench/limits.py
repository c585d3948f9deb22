"""The machine's limits, measured the way the kernels would meet them: a STREAM-style triad through
the kernel library's own OpenMP loop (GB/s counting two reads and one write per element), and sgemm
through the BLAS the kernels link (scipy-openblas32), both at the benchmark's thread count."""
from __future__ import annotations

import ctypes
import time
from pathlib import Path

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


# ------------------------------------------------------------------------------------------------ memory levels
# A workload is held against the limit of the memory level its bytes fit in: a 48 KB ReluGrad runs from L1 (or L2)
# and a triad over 384 MB from DRAM; a DRAM figure for a cache-sized workload says nothing.

CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")
LEVELS = ("L1", "L2", "L3", "DRAM")


def parse_size(text: str) -> int:
    """sysfs's cache size ("48K", "2048K", "105M", "1G" or plain bytes) in bytes."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    return int(text.rstrip("KMGB") or 0) * scale


def cache_sizes(root: Path = CACHE_ROOT) -> dict[str, int]:
    """{"L1": bytes, "L2": bytes, "L3": bytes} of the data (or unified) caches cpu0 sees, from sysfs; the levels it does
    not list are left out ({} where there is no sysfs)."""
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text().strip())
            size = parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size > 0:
            sizes[f"L{level}"] = max(size, sizes.get(f"L{level}", 0))
    return sizes


def memory_level(nbytes: int, caches: dict[str, int]) -> str:
    """The first memory level whose capacity holds nbytes (a workload's working set): L1, L2, L3 or DRAM."""
    for level in LEVELS[:-1]:
        if level in caches and nbytes <= caches[level]:
            return level
    return "DRAM"


def level_working_sets(caches: dict[str, int]) -> dict[str, int]:
    """The triad's working set (bytes) that stands for each level: half of each cache (so it stays there with the
    code's own data beside it), and the 384 MB of the DRAM triad."""
    sets = {level: caches[level] // 2 for level in LEVELS[:-1] if level in caches}
    sets["DRAM"] = 3 * 4 * TRIAD_ELEMENTS
    return sets


def best_triad_seconds(threads: int, n: int, budget: Budget) -> tuple[float, int]:
    """(median seconds, threads) of the faster triad over n elements at one thread and at `threads`: a cache-sized
    workload's kernel may run on one thread, and an OpenMP team's start-up (milliseconds on a loaded machine)
    would otherwise make the limit of a 48 KB workload a thousand times too low."""
    best = None
    for t in dict.fromkeys((1, threads)):
        median, _ = median_and_spread(repeat(triad_call(t, n), budget))
        if best is None or median < best[0]:
            best = (median, t)
    assert best is not None
    return best


def level_triads(threads: int, budget: Budget, caches: dict[str, int], dram: bool = True) -> dict[str, dict]:
    """{level: {"bytes", "triad_gbs", "threads"}}: the triad at each level's working set (DRAM's left out when not
    `dram`: the bench measures it as its triad limit already)."""
    out = {}
    for level, nbytes in level_working_sets(caches).items():
        if level == "DRAM" and not dram:
            continue
        n = max(16, nbytes // 12)
        median, t = best_triad_seconds(threads, n, budget)
        out[level] = {"bytes": 12 * n, "triad_gbs": 12 * n / median / 1e9, "threads": t}
    return out
