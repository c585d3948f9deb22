"""The vector-Jacobian identity: proof that a gradient reference is the gradient of its forward op.

For cotangents c (the grad_output inputs) and a random tangent t on the forward inputs,
    sum_k <grad_k, t_k>  ~=  sum_j <c_j, (f_j(x + eps t) - f_j(x - eps t)) / (2 eps)>
with f the float64 forward reference. One random direction checks the whole Jacobian at O(1) cost;
a wrong gradient would have to be orthogonal to a random t to slip through.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.cases import Case, stable_seed
from harness.dotted import resolve
from harness.tensors import make_tensors, resolve_attributes

EPS = float(np.finfo(np.float64).eps) ** (1 / 3)  # balances truncation (eps^2) and roundoff (1/eps)


@dataclass(frozen=True)
class VjpCheck:
    analytic: float  # sum <grad, t>
    numeric: float  # sum <c, central difference>
    scale: float  # the size of the terms summed, to judge the difference against

    @property
    def error(self) -> float:
        return abs(self.analytic - self.numeric) / max(self.scale, 1e-300)


def vjp_check(case: Case, reference: str | None = None, seed: int = 0) -> VjpCheck:
    """Check the spec's reference (or another function, to show the check catches a wrong one)."""
    spec = case.spec
    if spec.forward is None:
        raise ValueError(f"{spec.op} has no forward op to differentiate")
    inputs, x = make_tensors(case, seed)  # the case's own values (e.g. float32), used in float64 below
    inputs = {k: None if v is None else v.astype(np.float64) for k, v in inputs.items()}
    attrs = resolve_attributes(spec, case.attributes)
    forward = resolve(spec.forward.reference)
    forward_attrs = {a: attrs[a] for a in spec.forward.attributes}
    # Saved forward outputs exactly as float64 computes them: rounding them to the case dtype would
    # charge the check with that rounding (Y = 1 - 2^-24 instead of the true sigmoid near saturation).
    exact = _forward(spec, forward, x, forward_attrs)
    for i in spec.inputs:
        if i.role in ("forward_output", "saved_activation") and inputs[i.name] is not None:
            inputs[i.name] = exact[i.forward_name or i.name]

    grads = resolve(reference or spec.reference)(**inputs, **attrs)
    grads = grads if isinstance(grads, tuple) else (grads,)
    by_forward_input = {o.grad_of: g for o, g in zip(spec.outputs, grads) if o.grad_of and g is not None}
    cotangents = {i.grad_of: inputs[i.name] for i in spec.inputs if i.role == "grad_output" and inputs[i.name] is not None}

    rng = np.random.default_rng(stable_seed("vjp", spec.id, case.id))
    analytic = numeric = scale = 0.0
    for name, grad in by_forward_input.items():
        if x.get(name) is None or x[name].size == 0:
            continue
        # Steps relative to each element's size keep the difference above float64 roundoff at any magnitude.
        direction = rng.standard_normal(x[name].shape) * EPS * np.maximum(1.0, np.abs(x[name]))
        plus = _forward(spec, forward, {**x, name: x[name] + direction}, forward_attrs)
        minus = _forward(spec, forward, {**x, name: x[name] - direction}, forward_attrs)
        analytic += float(np.sum(grad * direction))
        scale += float(np.sum(np.abs(grad * direction)))
        numeric += sum(float(np.sum(c * (plus[o] - minus[o]))) / 2 for o, c in cotangents.items())
    return VjpCheck(analytic, numeric, scale)


def _forward(spec, forward, args, attrs) -> dict[str, np.ndarray]:
    out = forward(**args, **attrs)
    return dict(zip(spec.forward.outputs, out if isinstance(out, tuple) else (out,)))
