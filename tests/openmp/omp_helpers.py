"""Helpers for tests/openmp: subprocess isolation and float64 reference formulas."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

# The C op table (one OPC_OP(<op>, "<file>") line per op): the registry's order and each op's C file.
C_OP_TABLE = Path(__file__).resolve().parents[2] / "csrc" / "ops.def"


def c_op_table() -> list[tuple[str, str]]:
    """(op, its C file) per line of csrc/ops.def, in registry order."""
    return re.findall(r'^OPC_OP\((\w+), *"([\w./-]+)"\)', C_OP_TABLE.read_text(), re.MULTILINE)


_erf = np.frompyfunc(math.erf, 1, 1)
_erfc = np.frompyfunc(math.erfc, 1, 1)


def run_isolated(code: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run Python code in a fresh interpreter, so a crash in C fails a test instead of pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


def erf(x):
    return _erf(np.asarray(x, dtype=np.float64)).astype(np.float64)


def norm_cdf(x):
    x = np.asarray(x, dtype=np.float64)
    return 0.5 * _erfc(-x / math.sqrt(2.0)).astype(np.float64)


def assert_close(actual, expected, atol, rtol, what=""):
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    assert np.array_equal(nan_a, nan_e), f"{what}: NaN pattern differs"
    fin = ~nan_e
    err = np.abs(a[fin] - e[fin])
    bound = atol + rtol * np.abs(e[fin])
    with np.errstate(invalid="ignore"):
        bad = ~(err <= bound) & ~((a[fin] == e[fin]))
    assert not bad.any(), (f"{what}: {bad.sum()} elements out of tolerance; worst |err| "
                           f"{np.nanmax(err) if err.size else 0:.3g}")
