"""Judging one output against the float64 reference.

An element passes when |actual - expected| <= harness.core.tolerance.allowed_error (atol + rtol * |expected|,
+ a per-element allowance a spec may add, e.g. for long reductions). Special values are patterns, not
numbers: NaN where the reference has NaN and only there, infinities of the same sign; signed zero is ignored.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from harness.core import dtypes
from harness.core.status import Problem
from harness.core.tolerance import Tolerance, allowed_error  # Tolerance: re-exported


@dataclass
class Comparison:
    passed: bool
    size: int
    mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: float = 0.0
    budget_used: float = 0.0  # largest error / allowed error; <= 1 passes
    worst: dict | None = None  # {"index", "actual", "expected"} of the element using most budget
    problems: list[str] = field(default_factory=list)  # one line each, for people
    kinds: list[str] = field(default_factory=list)  # harness.core.status.Problem values: what decisions read
    tolerance: Tolerance | None = None

    def fail(self, kind: Problem, text: str, first: bool = False) -> None:
        self.problems.insert(0, text) if first else self.problems.append(text)
        self.kinds.insert(0, kind.value) if first else self.kinds.append(kind.value)
        self.passed = False

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("max_abs", "max_rel", "max_ulp", "budget_used"):
            out[key] = json_number(out[key])
        if self.worst:
            out["worst"] = {k: json_number(v) if k != "index" else v for k, v in self.worst.items()}
        return out


def json_number(x: float):
    """JSON has no inf or NaN: write them as strings, everything else as a float."""
    x = float(x)
    return x if np.isfinite(x) else str(x)


def _index(flat: int, shape: tuple, layout: tuple | None) -> list[int]:
    """An element's index: in the array, or [k, i, ...] in tensor k of a sequence judged joined (layout: the
    shapes of its tensors, harness.core.sequences)."""
    if layout is not None:
        for k, element in enumerate(layout):
            if flat < math.prod(element):
                return [k, *(int(i) for i in np.unravel_index(flat, element))]
            flat -= math.prod(element)
    return [int(i) for i in np.unravel_index(flat, shape)]


def _at(mask: np.ndarray, layout: tuple | None = None) -> str:
    return str(_index(int(np.flatnonzero(mask)[0]), mask.shape, layout))


def judged_expected(r: np.ndarray, dtype: str) -> np.ndarray:
    """A finite float64 result beyond the dtype's range rounds to +/-inf: that is the expected value."""
    if dtype not in dtypes.FLOATS or dtype == "float64":
        return r
    with np.errstate(over="ignore"):
        rounded = r.astype(dtypes.NUMPY[dtype]).astype(np.float64)
    return np.where(np.isfinite(r) & np.isinf(rounded), rounded, r)


def compare(actual: np.ndarray, expected: np.ndarray, dtype: str, tol: Tolerance,
            allowance: np.ndarray | None = None, layout: tuple | None = None) -> Comparison:
    """layout: for a sequence judged as its tensors joined, their shapes: indices then read [tensor, i, ...]."""
    if actual.shape != expected.shape:
        return Comparison(False, int(expected.size), int(expected.size), problems=[
            f"shape {list(actual.shape)}, expected {list(expected.shape)}"], kinds=[Problem.SHAPE.value], tolerance=tol)
    a = actual.astype(np.float64)
    r = judged_expected(np.asarray(expected, dtype=np.float64), dtype)
    result = Comparison(True, int(r.size), tolerance=tol)
    if r.size == 0:
        return result

    nan_r, nan_a = np.isnan(r), np.isnan(a)
    inf_r = np.isinf(r)
    finite_r = ~nan_r & ~inf_r
    missing_nan = nan_r & ~nan_a
    extra_nan = nan_a & ~nan_r
    wrong_inf = inf_r & ~nan_a & (a != r)
    for mask, kind, what in ((missing_nan, Problem.MISSING_NAN, "NaN expected but a number returned"),
                             (extra_nan, Problem.EXTRA_NAN, "NaN returned where a number was expected"),
                             (wrong_inf, Problem.WRONG_INF, "infinity expected but a different value returned")):
        if mask.any():
            result.fail(kind, f"{what} at {int(mask.sum())} element(s), first at {_at(mask, layout)}")

    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite_r & ~nan_a, np.abs(a - r), 0.0)  # inf when a is +/-inf
        allowed = allowed_error(tol, r, allowance)
        budget = np.where(err == 0, 0.0, err / np.where(allowed > 0, allowed, np.inf))
        budget = np.where((err > 0) & (allowed == 0), np.inf, budget)
        rel = np.where(finite_r & (r != 0), err / np.abs(np.where(r != 0, r, 1.0)), 0.0)
    comparable = finite_r & np.isfinite(a)
    if comparable.any():
        result.max_ulp = float(dtypes.ulp_distance(a[comparable], r[comparable], dtype).max())
    result.max_abs, result.max_rel = float(err.max()), float(rel.max())
    result.budget_used = float(budget.max())
    over = budget > 1.0
    result.mismatches = int((over | missing_nan | extra_nan | wrong_inf).sum())
    worst = int(np.argmax(budget))
    result.worst = {"index": _index(worst, r.shape, layout), "actual": float(a.flat[worst]), "expected": float(r.flat[worst])}
    if over.any():
        result.fail(
            Problem.OUT_OF_TOLERANCE, f"{int(over.sum())} of {r.size} element(s) outside tolerance: max abs err {result.max_abs:.3g}, "
            f"worst at {result.worst['index']} got {result.worst['actual']:.7g} expected "
            f"{result.worst['expected']:.7g} (tolerance used x{result.budget_used:.3g})")
    return result
