"""The gradient proof: the reference of a gradient op must be the gradient of its forward op.

For the cotangents c (the grad_output inputs), the gradient g_k the reference returns for a forward
input x_k, and a random direction t on x_k, the vector-Jacobian identity says
    D(h) = sum_j <c_j, f_j(x + h t) - f_j(x - h t)> / 2  =  h <g_k, t> + O(h^3)
with f the float64 forward reference. The remainder r(h) = |D(h) - h <g_k, t>| is judged by how it
falls as the step halves (a Taylor-remainder test), so no fixed epsilon decides:
- a right gradient leaves the h^3 term: r falls 8x per halving, until it reaches float64 roundoff;
- a wrong one leaves h <g_k - g_true, t>: r falls only 2x per halving, down to roundoff;
so at the smallest step where r is clearly above roundoff, r must fall at least at second order
(by 2^ORDER or more to the next step). Steps start from the spread of x_k's values, not their size,
so inputs offset far from zero (X around 1000 +- 1) are judged like any others. One random direction
per forward input checks its whole Jacobian: a wrong gradient would have to be orthogonal to it.

Points where the math has no derivative (ReLU at 0, inf, NaN) are declared per case group with
`vjp: "why not"` in the spec; those groups are not checked. `opconform run` and the generated tests
record one `check: gradient` result of the `reference` backend per valid case (harness.run.case_checks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from harness.core.cases import Case, stable_seed
from harness.core.compare import json_number
from harness.core.shapes import forward_attributes, resolve_attributes
from harness.spec.dotted import resolve
from harness.spec.model import Forward

ORDER = 1.75  # the remainder must fall at least this many orders per halving (right: 3, wrong: 1)
SIGNIFICANT = 16.0  # a remainder counts when it is this many times the roundoff estimate
ROUNDOFF = 32.0  # float64 eps multiples a sum of rounded terms may be off by
HALVINGS = 28  # at most this many steps after the first
FIRST_STEP = 2.0 ** -4  # the first step, as a share of each element's size or the input's spread
EPS = float(np.finfo(np.float64).eps)


@dataclass
class InputCheck:
    """The Taylor-remainder sequence of one forward input."""
    name: str
    steps: list[float] = field(default_factory=list)
    remainders: list[float] = field(default_factory=list)  # r(h)
    roundoff: list[float] = field(default_factory=list)  # what float64 rounding alone could make r(h)
    order: float | None = None  # observed at the smallest significant step; None: r at roundoff throughout
    passed: bool = True

    def summary(self) -> str:
        if self.order is None:
            return f"{self.name}: remainder at float64 roundoff at every step"
        verb = "falls" if self.passed else "falls only"
        return f"{self.name}: remainder {verb} at order {self.order:.2f} (needs {ORDER:g})"


@dataclass
class GradientCheck:
    inputs: list[InputCheck] = field(default_factory=list)
    skipped: str | None = None  # why nothing could be checked

    @property
    def passed(self) -> bool:
        return all(i.passed for i in self.inputs)

    def detail(self) -> str:
        if self.skipped:
            return f"gradient: {self.skipped}"
        parts = "; ".join(i.summary() for i in self.inputs)
        if self.passed:
            return f"gradient: the reference is its forward op's vector-Jacobian product ({parts})"
        return f"gradient: the reference is not the gradient of its forward op: {parts}"

    def to_json(self) -> dict:
        # JSON has no inf or NaN: a remainder that overflowed (dY near the largest float64) is written as a string
        return {i.name: {"order": json_number(i.order) if i.order is not None else None, "passed": i.passed,
                         "steps": i.steps, "remainders": [json_number(r) for r in i.remainders],
                         "roundoff": [json_number(r) for r in i.roundoff]} for i in self.inputs}


def applies(case: Case) -> bool:
    """A valid case of an op with a forward op, in a group that does not declare the identity moot."""
    return case.valid and case.spec.forward is not None and case.group.vjp is True


def gradient_check(case: Case, inputs: dict, forward_inputs: dict, reference: str | None = None,
                   seed: int = 0) -> GradientCheck:
    """Check the spec's reference (or `reference`, to show the check catches a wrong one) on the case's
    own inputs (op inputs and the float64 forward inputs they were derived from, harness.core.tensors.make_tensors)."""
    spec = case.spec
    if spec.forward is None:
        raise ValueError(f"{spec.op} has no forward op to differentiate")
    with np.errstate(all="ignore"):
        return _check(case, spec.forward, inputs, forward_inputs, reference, seed)


def _check(case: Case, forward_op: Forward, inputs: dict, x: dict, reference: str | None, seed: int) -> GradientCheck:
    spec = case.spec
    inputs = {k: None if v is None else np.asarray(v, dtype=np.float64) for k, v in inputs.items()}
    x = {k: None if v is None else np.asarray(v, dtype=np.float64) for k, v in x.items()}
    attrs = resolve_attributes(spec, case.attributes)
    forward = resolve(forward_op.reference)
    forward_attrs = forward_attributes(case)
    # Saved forward outputs exactly as float64 computes them: rounding them to the case dtype would
    # charge the check with that rounding (Y = 1 - 2^-24 instead of the true sigmoid near saturation).
    exact = _forward(spec, forward, x, forward_attrs)
    for i in spec.inputs:
        if i.role in ("forward_output", "saved_activation") and inputs.get(i.name) is not None:
            inputs[i.name] = exact[i.forward_name or i.name]

    grads = resolve(reference or spec.reference)(**inputs, **attrs)
    grads = grads if isinstance(grads, tuple) else (grads,)
    by_forward_input = {o.grad_of: np.asarray(g, dtype=np.float64) for o, g in zip(spec.outputs, grads)
                        if o.grad_of and g is not None}
    # a valid spec's grad_output names its forward output in grad_of (harness.core.spec_checks)
    cotangents = {i.grad_of: inputs[i.name] for i in spec.inputs
                  if i.role == "grad_output" and i.grad_of is not None and inputs.get(i.name) is not None}
    result = GradientCheck()
    rng = np.random.default_rng(stable_seed("gradient", spec.id, case.full_id, seed))
    for name, grad in by_forward_input.items():
        point = x.get(name)
        if point is None or point.size == 0:
            continue
        if not (np.isfinite(point).all() and np.isfinite(grad).all()
                and all(np.isfinite(c).all() for c in cotangents.values())):
            result.skipped = (f"{name}: non-finite inputs or gradients; declare the group's `vjp: \"why not\"` "
                              "in the spec")
            result.inputs.append(InputCheck(name, passed=False))
            continue
        # Each element moves in proportion to its own size (zeros by the smallest nonzero size, at most 1):
        # values of 1e4 and 1e32 in one tensor each get a step they can feel, none is pushed across a
        # kink near zero, and X = 1000 +- 1 starts with large steps that the sweep takes down to its scale.
        size = np.abs(point)
        floor = min(1.0, float(size[size > 0].min())) if (size > 0).any() else 1.0
        direction = rng.standard_normal(point.shape) * np.where(size > 0, size, floor)

        def pairing(h: float) -> tuple[float, float]:
            plus = _forward(spec, forward, {**x, name: point + h * direction}, forward_attrs)
            minus = _forward(spec, forward, {**x, name: point - h * direction}, forward_attrs)
            d = sum(float(np.sum(c * (plus[o] - minus[o]))) for o, c in cotangents.items()) / 2
            size = sum(float(np.sum(np.abs(c * plus[o])) + np.sum(np.abs(c * minus[o]))) for o, c in cotangents.items()) / 2
            return d, size

        result.inputs.append(_taylor(name, pairing, grad, direction, point))
    if not result.inputs:
        result.skipped = "no forward input with a gradient to check (every one is empty or omitted)"
    return result


def _taylor(name: str, pairing, grad: np.ndarray, direction: np.ndarray, point: np.ndarray) -> InputCheck:
    slope = float(np.sum(grad * direction))  # <g, t>
    slope_size = float(np.sum(np.abs(grad * direction)))
    h = FIRST_STEP
    # rounding x + h t moves each element by up to eps |x|: that share of the step is noise
    input_rounding = EPS * float(np.max(np.abs(point) / np.maximum(np.abs(direction), 1e-300))) / h
    input_rounding = min(input_rounding, EPS / h * 1e3)  # a near-zero direction element must not swamp it
    check = InputCheck(name)
    quiet = 0
    for _ in range(HALVINGS + 1):
        d, size = pairing(h)
        remainder = abs(d - h * slope)
        roundoff = ROUNDOFF * EPS * (size + h * slope_size) + abs(d) * input_rounding * 4
        check.steps.append(h)
        check.remainders.append(remainder)
        check.roundoff.append(roundoff)
        quiet = quiet + 1 if remainder <= SIGNIFICANT * roundoff else 0
        if quiet == 2:  # two steps at roundoff: the sequence has said what it can
            break
        h /= 2
        input_rounding *= 2
    significant = [k for k, (r, n) in enumerate(zip(check.remainders, check.roundoff)) if r > SIGNIFICANT * n]
    if not significant:
        return check  # exact to roundoff at every step (e.g. a piecewise-linear forward)
    last = significant[-1]
    if last + 1 >= len(check.remainders):
        # still above roundoff at the smallest step: compare with the step before
        last -= 1
    if last < 0:
        check.order, check.passed = 0.0, False
        return check
    r, nxt = check.remainders[last], max(check.remainders[last + 1], check.roundoff[last + 1])
    check.order = math.log2(r / nxt) if nxt > 0 else 64.0  # fell to exactly zero: as fast as can be
    check.passed = check.order >= ORDER
    return check


def _forward(spec, forward, args, attrs) -> dict[str, np.ndarray]:
    out = forward(**args, **attrs)
    return dict(zip(spec.forward.outputs, out if isinstance(out, tuple) else (out,)))
