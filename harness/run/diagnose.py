"""Failure diagnosis: what a wrong output computes instead.

A backend's failing outputs are scored against plausible wrong semantics: the spec's
`alternative_semantics` (functions called like the reference: the legacy vs the single softmax axis,
Softmax vs LogSoftmax, exact vs tanh GELU, ...) and built-in transforms tried for every op:

    output transposed          the expected output with its axes reversed (a layout mix-up)
    output negated             the expected output with its sign flipped
    first two inputs swapped   the reference fed its first two inputs the other way round (same shapes)

An alternative matches when every requested output is within the case's own tolerance of it. One that
is indistinguishable from the spec's semantics on this case (e.g. both softmax axis conventions on
the last axis) is not scored. The diagnosis reads e.g. "matches legacy SoftmaxGrad axis semantics
(max abs err 3e-08)"; when none matches, it names the nearest one if that is nearer than the spec's own
semantics. Only failures are diagnosed, so this costs nothing on passing runs.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from harness.core.compare import Comparison, compare, json_number
from harness.core.evaluate import evaluate
from harness.core.tolerance import Tolerance
from harness.spec.model import BUILTIN_TRANSFORMS

# Each takes the engine's Prepared case and gives float64 outputs, or None where it does not apply.
Builtin = Callable[..., "list[np.ndarray] | None"]


def _transposed(prepared) -> list[np.ndarray] | None:
    if all(e.ndim < 2 for e in prepared.expected):
        return None  # transposing changes nothing here
    return [e.T for e in prepared.expected]


def _negated(prepared) -> list[np.ndarray] | None:
    return [-e for e in prepared.expected]


def _swapped(prepared) -> list[np.ndarray] | None:
    spec, inputs = prepared.case.spec, prepared.inputs
    if len(spec.inputs) < 2:
        return None
    a, b = spec.inputs[0].name, spec.inputs[1].name
    if inputs.get(a) is None or inputs.get(b) is None or inputs[a].shape != inputs[b].shape:
        return None
    return evaluate(spec, {**inputs, a: inputs[b], b: inputs[a]}, prepared.case.attributes)


BUILTINS: dict[str, Builtin] = dict(zip(BUILTIN_TRANSFORMS, (_transposed, _negated, _swapped)))


def alternatives(prepared) -> list[tuple[str, list[np.ndarray] | None]]:
    """(name, float64 outputs or None when it does not apply to this case), spec's first."""
    spec, case = prepared.case.spec, prepared.case
    out = []
    for alt in spec.alternative_semantics:
        try:
            values = evaluate(spec.model_copy(update={"reference": alt.reference}), prepared.inputs, case.attributes)
        except Exception:  # noqa: BLE001 - an alternative that cannot take this case's inputs simply does not apply
            values = None
        out.append((alt.name, values))
    for name, make in BUILTINS.items():
        try:
            with np.errstate(all="ignore"):
                out.append((name, make(prepared)))
        except Exception:  # noqa: BLE001 - e.g. swapped inputs the reference cannot take
            out.append((name, None))
    return out


def _scores(prepared, actual: list, values: list[np.ndarray], tolerance: Tolerance) -> list[Comparison]:
    case, spec = prepared.case, prepared.case.spec
    scores = []
    for index, out in enumerate(spec.outputs):
        if out.name not in case.requested_outputs or actual[index] is None:
            continue
        allowance = prepared.allowance[index] if prepared.allowance else None
        if allowance is not None and allowance.shape != values[index].shape:
            allowance = None  # a transposed alternative: the allowance's layout no longer fits
        scores.append(compare(actual[index], values[index], spec.dtype_of(out, case.dtype), tolerance, allowance))
    return scores


def _score(name: str, scores: list[Comparison], shapes_fit: bool) -> dict:
    return {"name": name, "passed": all(s.passed for s in scores),
            "mismatches": sum(s.mismatches for s in scores),
            "max_abs": json_number(max(s.max_abs for s in scores) if shapes_fit else float("inf")),
            "budget_used": json_number(max(s.budget_used for s in scores) if shapes_fit else float("inf"))}


def _rank(candidate: dict) -> tuple:
    return (not candidate["passed"], candidate["mismatches"], _number(candidate["budget_used"]))


def diagnose(prepared, actual: list, tolerance: Tolerance) -> dict | None:
    """{summary, matches, candidates} for the failing outputs `actual`, or None if no alternative applies."""
    candidates = []
    for name, values in alternatives(prepared):
        if values is None:
            continue
        # Indistinguishable from the spec's own semantics on this case: a match would mean nothing.
        as_outputs = [v if a is not None else None for v, a in zip(values, actual)]
        if all(s.passed for s in _scores(prepared, as_outputs, prepared.expected, tolerance)):
            continue
        scores = _scores(prepared, actual, values, tolerance)
        if scores:
            candidates.append(_score(name, scores, all(a is None or a.shape == v.shape for a, v in zip(actual, values))))
    if not candidates:
        return None
    candidates.sort(key=_rank)
    best = candidates[0]
    if best["passed"]:
        summary = f"matches {best['name']} (max abs err {_number(best['max_abs']):.2g})"
    else:
        fits = [a is None or a.shape == e.shape for a, e in zip(actual, prepared.expected)]
        spec_semantics = _score("the spec", _scores(prepared, actual, prepared.expected, tolerance), all(fits))
        summary = f"matches none of the {len(candidates)} alternative semantics tried"
        if _rank(best) < _rank(spec_semantics):  # worth naming only when it is nearer than the spec's own
            summary += (f"; nearest: {best['name']} ({best['mismatches']} element(s) off, "
                        f"max abs err {_number(best['max_abs']):.2g})")
    return {"summary": summary, "matches": best["name"] if best["passed"] else None, "candidates": candidates}


def _number(x) -> float:
    return float(x)  # json_number wrote inf/NaN as strings; float() reads them back
