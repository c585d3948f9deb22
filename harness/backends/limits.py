"""The wall-clock limits on backends, in one light module (the CLI reads the defaults before anything
heavy loads). Each one catches a real hang and is at least 10x the slowest passing call measured
under load; docs/limits.md lists every limit in the harness, with the figures and the reasoning.

Measured 2026-11-28 on a 2-core machine shared with other jobs, every case of the nightly tier (which
holds ci and smoke), one call per case and backend, wall time of the call as the limit sees it:

                    load 4-6 (others' jobs)          load 9-10 (their jobs plus 3 busy loops)
    openmp          0.87 s  SoftmaxCrossEntropyLossGrad float32-vocab/shape=256x32000    2.15 s
    ort             0.76 s  ConvGrad large_nightly 3-D (0.58 s the vocab case)            4.37 s (vocab case)
    ort-autograd    1.09 s  SoftmaxCrossEntropyLossGrad float32-vocab/shape=256x32000    3.36 s
    ci tier alone   0.55 s  ort, FastGeluGrad dy_much_smaller (a fresh worker after a crash)  2.30 s
"""
from __future__ import annotations

# One backend call (`opconform run --timeout`, `--opconform-timeout` under pytest; a spec group's
# `timeout` may shorten it for inputs known to hang): 60 s is 14x the slowest passing call under load
# (ort, 4.37 s). It was 20 s, 4.6x: a loaded CI machine could have turned a slow pass into a "hang".
DEFAULT_TIMEOUT = 60.0
TIMEOUT_OPTION = "--timeout (pytest: --opconform-timeout)"  # how a message names it

# A worker's first answer, which loads the backend's library and says what it is ({'call': 'info'},
# also ort-cuda's provider check), and a fresh worker's imports (one spawned or forked after a crash
# says it is ready before a case's --timeout starts: harness.backends.worker): 120 s is 21x the slowest
# under load (openmp 5.7 s, ort 4.0 s, ort-autograd 3.2 s at load 8; 0.7-0.9 s at load 5). When it fires
# on the first answer the backend is unavailable, which fails the verdict for an expected backend (on a
# restart, the case is a hang naming this limit): it must not fire on a slow machine.
INFO_TIMEOUT = 120.0
INFO_LIMIT = "limit on loading the backend's library"

# `opconform bench` only (never a verdict): all repetitions of one benchmark. The repetitions stop after
# harness.core.timing.Budget.seconds (1.2 s of timed calls), so 900 s only ends a kernel that hangs.
BENCH_TIMEOUT = 900.0
BENCH_LIMIT = "bench limit on all repetitions of one benchmark"
