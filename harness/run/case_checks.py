"""Every check of one case: what `opconform run` writes and a generated test asserts.

- `run_case`: one prepared case on one backend: the engine's judgement against the reference, the
  self-consistency checks that follow it (harness.run.self_consistency), then the waivers.
- `gradient_case`: the reference itself against its forward op (harness.core.gradcheck), once per valid
  case, whatever backends run: a wrong reference would misjudge every one of them. It is recorded as
  the `reference` backend's result with `check: gradient`, and fails the gate like any other.

Imports flow one way: engine -> self_consistency, gradcheck -> this module -> runner, plugin.
"""
from __future__ import annotations

from harness.backends.base import Backend
from harness.core.gradcheck import applies, gradient_check
from harness.core.status import Check, Failure, Status
from harness.run import waivers as waiver_rules
from harness.run.catalog import RunCatalog
from harness.run.engine import Prepared, Result, judge, new_result
from harness.run.self_consistency import follow_ups

GRADIENT_BACKEND = "reference"  # whose result the gradient check is


def run_case(catalog: RunCatalog, prepared: Prepared, backend: Backend) -> list[Result]:
    """Judge one prepared case on one backend with the catalog's tolerance and waivers, plus the
    self-consistency checks that follow it."""
    case = prepared.case
    skip = None if prepared.problem else waiver_rules.skipping(case, backend.name, catalog.waivers)
    if skip is not None:
        result = new_result(prepared, backend.name)
        result.set(Status.WAIVED, detail=f"not run: waived by {skip.id} (skip, {skip.because}): {skip.reason}")
        result.waiver = skip.id
        return [result]
    tolerance = catalog.tolerance(case.spec, case.dtype)
    first = judge(prepared, backend, tolerance)
    results = [first, *follow_ups(prepared, backend, first, tolerance, catalog)]
    for result in results:
        waiver_rules.apply(result, catalog.waivers)
    return results


def gradient_case(prepared: Prepared, reference: str | None = None) -> Result | None:
    """The gradient check's result for this case, or None where it does not apply (no forward op, an
    invalid case, a group that declares `vjp: "why not"`). `reference` replaces the spec's, for tests."""
    case = prepared.case
    if not applies(case):
        return None
    result = new_result(prepared, GRADIENT_BACKEND)
    result.check = Check.GRADIENT.value
    if prepared.problem:
        result.set(Status.ERROR, detail=f"gradient: {prepared.problem}")
        return result
    try:
        check = gradient_check(case, prepared.inputs, prepared.forward_inputs, reference=reference)
    except Exception as e:  # noqa: BLE001 - a reference or forward bug must not end the run: it is an error result
        result.set(Status.ERROR, detail=f"gradient: {type(e).__name__}: {e}")
        return result
    result.outputs = {}
    result.gradient = check.to_json()
    if check.passed:
        result.detail = check.detail()
    else:
        result.set(Status.FAIL, Failure.NOT_A_GRADIENT, check.detail())
    return result
