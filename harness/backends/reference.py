"""The `reference` backend: the NumPy references in float64 (harness.core.evaluate), rounded once to the case dtype.

It rejects exactly what the spec calls invalid (harness.core.contract), so a spec's invalid-input cases
are checked against the spec itself as well as against real backends.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.backends.base import Backend, Outputs, Rejected, Request, Support
from harness.core import contract, dtypes, sequences
from harness.core.evaluate import evaluate


@dataclass
class ReferenceBackend(Backend):
    SUBJECTS = ("kernel", "training_graph")  # the float64 references of every spec, training-graph specs included

    def __post_init__(self):
        self.name = "reference"

    def run(self, request: Request):
        inputs = request.named_inputs()
        problems = contract.input_problems(request.spec, inputs, request.attributes)
        if problems:
            return Rejected("; ".join(problems))
        values = evaluate(request.spec, inputs, request.attributes)
        with np.errstate(over="ignore"):  # beyond the dtype's range rounds to +/-inf, as it should
            return Outputs([
                sequences.astype(v, dtypes.NUMPY[request.spec.dtype_of(out, request.dtype)]) if wanted else None
                for out, v, wanted in zip(request.spec.outputs, values, request.outputs)])

    def probe(self, request: Request) -> Support:
        """The reference runs exactly the dtypes the spec's type constraints allow."""
        spec = request.spec
        main = spec.main_type
        allowed = spec.type_constraints[main].types
        if request.dtype in allowed:
            return Support("supported", "reference", f"float64 NumPy reference, rounded once to {request.dtype}")
        return Support("not_registered", reason=f"the spec's type constraint {main} allows {', '.join(allowed)}")

    def environment(self) -> dict:
        return {"numpy": np.__version__}
