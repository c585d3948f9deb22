"""Per-element error allowances for reductions, on top of the dtype's atol + rtol.

A sum of K terms rounded in a dtype with unit roundoff u typically errs by about u * sqrt(K) times
the sum of the terms' magnitudes (the worst case is K, not sqrt(K), but needs adversarial order).
The spec names K and the magnitude (the same formula on absolute values, so the bound widens
where the formula cancels) and the dtype a kernel may accumulate in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.core import dtypes
from harness.spec.dotted import resolve
from harness.spec.model import Spec
from harness.core.tensors import resolve_attributes


def unit_roundoff(dtype: str) -> float:
    return float(dtypes.finfo(dtype).eps) / 2


def _per_output(value, count: int) -> list:
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value] * count


def allowances(spec: Spec, inputs: dict, written: dict, dtype: str,
               expected: list[np.ndarray]) -> tuple[list[np.ndarray | None], list[str]]:
    """(allowance array or None, provenance text) per output, in the spec's output order."""
    n = len(spec.outputs)
    if spec.accuracy is None:
        return [None] * n, [""] * n
    acc = spec.accuracy
    args = {k: None if v is None else np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    attrs = resolve_attributes(spec, written)
    lengths = _per_output(resolve(acc.reduction_length)(**args, **attrs), n)
    if acc.magnitude:
        with np.errstate(all="ignore"):
            magnitudes = _per_output(resolve(acc.magnitude)(**args, **attrs), n)
    else:
        magnitudes = [np.abs(e) for e in expected]
    accumulate = acc.accumulate.get(dtype, dtype) if dtype in dtypes.FLOATS else "float64"
    out, notes = [], []
    for k, m, e in zip(lengths, magnitudes, expected):
        if m is None or k is None:
            out.append(None)
            notes.append("")
            continue
        term = Reduction(int(k), accumulate, acc.factor)
        allowance = term.per_unit_magnitude * np.broadcast_to(np.asarray(m, dtype=np.float64), e.shape)
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
