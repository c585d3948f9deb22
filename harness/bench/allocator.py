"""The C allocator's state for the peers timed in the bench process (torch, reference).

glibc serves a large allocation with a fresh mmap and unmaps it on free, so a peer that allocates its
output on every call (torch's backward ops do) pays a page fault per 4 KiB of it, every call: about
6 of the 8 ms of torch's BatchNormalizationGrad at the large size, measured. How often depends on what ran before
(glibc raises its threshold after some frees), so the /torch column moved with the workload order.
openmp writes into outputs allocated once and onnxruntime reuses its arena, so the bench holds the
process to that steady state too, as a training loop with a caching allocator would see it: large
blocks come from the heap and freed memory stays there.
"""
from __future__ import annotations

import ctypes
import ctypes.util
from contextlib import contextmanager

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
GLIBC_DEFAULT = 128 * 1024  # both thresholds' defaults
WARM_BYTES = 1 << 30


def _mallopt():
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):  # not glibc
        return None
    if fn is not None:
        fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn


@contextmanager
def warm_allocator():
    """Within the block, allocations up to 1 GiB reuse the heap (no mmap, no trim). Yields what it did,
    for the bench's environment record."""
    mallopt = _mallopt()
    if mallopt is None or not (mallopt(M_MMAP_THRESHOLD, WARM_BYTES) and mallopt(M_TRIM_THRESHOLD, WARM_BYTES)):
        yield "not warmed (no glibc mallopt): peers that allocate per call pay page faults"
        return
    try:
        yield "glibc mallopt: mmap and trim thresholds 1 GiB (outputs reuse the heap, no page faults per call)"
    finally:
        mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT)
        mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT)
