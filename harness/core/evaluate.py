"""The float64 reference of a spec: what every check compares against (the engine's expected values, the
self-consistency checks, diagnosis and mutation) and what the `reference` backend rounds to the case dtype."""
from __future__ import annotations

import numpy as np

from harness.core import sequences
from harness.core.shapes import resolve_attributes
from harness.spec.dotted import resolve
from harness.spec.model import Spec


def evaluate(spec: Spec, inputs: dict[str, sequences.Value | None], written: dict, reference: str | None = None
             ) -> list[sequences.Value]:
    """The reference outputs in float64, in the spec's output order (`reference`: another function of the same
    signature, e.g. forward.derivative)."""
    reference = reference or spec.reference
    args = {name: sequences.float64(v) for name, v in inputs.items()}  # a sequence: a list of float64 arrays
    with np.errstate(all="ignore"):  # NaN and inf inputs are cases, not accidents
        result = resolve(reference)(**args, **resolve_attributes(spec, written))
    result = list(result) if isinstance(result, tuple) else [result]
    if len(result) != len(spec.outputs):
        raise ValueError(f"{reference} returned {len(result)} outputs; the spec has {len(spec.outputs)}")
    return [[np.asarray(t, dtype=np.float64) for t in r] if spec.is_sequence(out) else np.asarray(r, dtype=np.float64)
            for out, r in zip(spec.outputs, result)]
