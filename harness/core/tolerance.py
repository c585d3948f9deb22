"""Tolerance, in one place: what a dtype or a spec allows, the reduction allowances, and the allowed error.

An element passes when |actual - expected| <= allowed_error(...): atol + rtol * |expected| (0 where the
expected value is not finite), plus the per-element allowance a spec may add for long reductions.
`opconform run` (harness.core.compare), `mutate` and `run-onnx` all judge through `allowed_error`.

A sum of K terms rounded in a dtype with unit roundoff u typically errs by about u * sqrt(K) times
the sum of the terms' magnitudes (the worst case is K, not sqrt(K), but needs adversarial order).
The spec names K and the magnitude (the same formula on absolute values, so the bound widens
where the formula cancels) and the dtype a kernel may accumulate in.
"""
from __future__ import annotations

import math
import typing
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.core import dtypes, sequences
from harness.core.shapes import resolve_attributes
from harness.spec.dotted import resolve
from harness.spec.model import Spec
from harness.spec.vocabulary import IntDType

INTEGER_DTYPES = typing.get_args(IntDType)  # copied or counted, never rounded: judged exactly unless a spec says otherwise


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    source: str  # where the numbers came from, e.g. "default(float32)"

    def noted(self, note: str) -> Tolerance:
        """The same numbers with a note on their provenance (an output's reduction term)."""
        return Tolerance(self.atol, self.rtol, self.source + note) if note else self


def default(dtype: str, atol: float, rtol: float) -> Tolerance:
    """A spec directory's default for a dtype (its _defaults/tolerances.yaml)."""
    return Tolerance(atol, rtol, f"default({dtype})")


class _DefaultTolerance(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)


class DefaultsFile(BaseModel):
    """The format of a spec directory's _defaults/tolerances.yaml (read by harness.core.spec_loader)."""
    model_config = ConfigDict(extra="forbid")
    tolerances: dict[str, _DefaultTolerance]


def defaults(parsed: DefaultsFile) -> dict[str, Tolerance]:
    """dtype -> the directory's default Tolerance."""
    return {d: default(d, t.atol, t.rtol) for d, t in parsed.tolerances.items()}


def tolerance_for(spec: Spec, dtype: str, defaults: dict[str, Tolerance]) -> Tolerance:
    """The spec's own tolerance for the dtype, else the default of the spec's directory."""
    if dtype in spec.tolerances:
        t = spec.tolerances[dtype]
        return Tolerance(t.atol, t.rtol, f"spec({dtype}): {t.reason}")
    if dtype not in defaults and dtype in INTEGER_DTYPES:  # a case in an integer dtype (ConcatTraining's shapes)
        return Tolerance(0.0, 0.0, f"exact({dtype})")
    return defaults[dtype]


def allowed_error(tolerance: Tolerance, expected: np.ndarray, allowance: np.ndarray | None = None) -> np.ndarray:
    """The largest |actual - expected| each element may have: the one formula every verdict uses."""
    expected = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = tolerance.atol + tolerance.rtol * np.abs(np.where(np.isfinite(expected), expected, 0.0))
        if allowance is not None:
            allowed = allowed + allowance
    return allowed


def unit_roundoff(dtype: str) -> float:
    return float(dtypes.finfo(dtype).eps) / 2


def _per_output(value, count: int) -> list:
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value] * count


def allowances(spec: Spec, inputs: dict, written: dict, dtype: str,
               expected: list[sequences.Value]) -> tuple[list[np.ndarray | None], list[str]]:
    """(allowance array or None, provenance text) per output, in the spec's output order (None where the
    expected output is None: an output not compared)."""
    n = len(spec.outputs)
    if spec.accuracy is None:
        return [None] * n, [""] * n
    acc = spec.accuracy
    args = {k: sequences.float64(v) for k, v in inputs.items()}
    attrs = resolve_attributes(spec, written)
    lengths = _per_output(resolve(acc.reduction_length)(**args, **attrs), n)
    if acc.magnitude:
        with np.errstate(all="ignore"):
            magnitudes = _per_output(resolve(acc.magnitude)(**args, **attrs), n)
    else:
        magnitudes = [None if e is None else np.abs(sequences.flat(e)) for e in expected]
    widened: dict[str, str] = dict(acc.accumulate.items())  # keyed by any dtype name, not only the float Literal
    accumulate = widened.get(dtype, dtype) if dtype in dtypes.FLOATS else "float64"
    out: list[np.ndarray | None] = []
    notes: list[str] = []
    for k, m, e in zip(lengths, magnitudes, expected):
        if m is None or k is None or e is None:
            out.append(None)
            notes.append("")
            continue
        term = Reduction(int(k), accumulate, acc.factor)
        # a sequence output's allowance is flat, element by element as judging joins it (harness.core.sequences)
        allowance = term.per_unit_magnitude * np.broadcast_to(np.asarray(sequences.flat(m), dtype=np.float64),
                                                              sequences.flat(e).shape)
        out.append(np.where(np.isfinite(allowance), allowance, 0.0))
        notes.append(" + " + term.note())
    return out, notes


@dataclass(frozen=True)
class Reduction:
    """One output's reduction term: the allowance and its note are both made from these numbers."""
    k: int
    accumulate: str
    factor: float = 1.0

    @property
    def growth(self) -> float:
        return math.sqrt(max(self.k, 1))

    @property
    def u(self) -> float:
        return unit_roundoff(self.accumulate)

    @property
    def per_unit_magnitude(self) -> float:
        return self.factor * self.u * self.growth

    def note(self) -> str:
        factor = f" * {self.factor:g}" if self.factor != 1 else ""
        return (f"reduction(K={self.k}, sqrt(K)={self.growth:.4g} * u({self.accumulate})={self.u:.3g}{factor} "
                f"* magnitude)")
