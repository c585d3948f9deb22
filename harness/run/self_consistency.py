"""Checks that hold a backend to its own results, run after the reference check of a case.

- `output_subset`: a valid case that requests a strict subset of the outputs must get exactly (bitwise)
  what the same backend returns when asked for every output. Kernels compute only what is requested,
  often along other code paths (ConvGrad without dX skips its col2im), so this is checked for every op
  with optional outputs, not per op.
- `own_saved_state`: for a spec with `own_saved_state`, the saved activations come from the same
  backend's run of the named op on the same inputs (GRUGrad fed the HAll and ZRH of its own
  GRUTraining): that state must match the forward reference (a layout the backend's two kernels
  share but the contract does not, e.g. ZRH in r, z, h order, fails here), and the op fed with it
  must match the reference fed with it.

- `thread_invariance`: a backend that promises bitwise identical outputs at any thread count
  (`THREAD_INVARIANT`, the openmp backend) runs every valid case at 1 and at 2 threads, asked to split
  even small work (`force_split`; small cases otherwise run on one thread); the two must be bitwise
  equal, so a thread-split bug fails the gate on whichever case exposes it, not only in a hand-written
  test.

An output that an intermittent known divergence of this backend (or of the backend whose kernels it runs)
names for the case is left out of output_subset and thread_invariance: the backend does not write it on every
run, so it cannot be bitwise repeatable; the detail says so, and a check left with no output is not made.
Another backend's declaration exempts nothing.

Each check is a Result of its own (`check` names it) for the same case id. All run only when the
reference check got outputs back: a crash or refusal there is already reported.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Set as AbstractSet

import numpy as np

from harness.backends.base import Backend, Crashed, Outcome, Outputs, Rejected, TimedOut, Unsupported
from harness.core import dtypes, sequences
from harness.core.compare import compare
from harness.core.evaluate import evaluate
from harness.core.status import Check
from harness.core.tolerance import Tolerance, allowances
from harness.run.engine import Prepared, Result, judge, new_result, request_for, unrepeatable_outputs

OUTPUT_SUBSET, OWN_SAVED_STATE, THREAD_INVARIANCE = (Check.OUTPUT_SUBSET.value, Check.OWN_SAVED_STATE.value,
                                                     Check.THREAD_INVARIANCE.value)
INVARIANCE_THREADS = (1, 2)


def follow_ups(prepared: Prepared, backend: Backend, first: Result, tolerance: Tolerance, catalog) -> list[Result]:
    """The self-consistency results for one case on one backend, after its reference check `first`."""
    case = prepared.case
    if not case.valid or prepared.problem or not first.outputs:
        return []
    results = []
    exempt = unrepeatable_outputs(case, backend.name, backend.divergences_from)
    checked = set(case.requested_outputs) - exempt
    if set(case.requested_outputs) < {o.name for o in case.spec.outputs} and checked:
        results.append(output_subset(prepared, backend, exempt))
    if getattr(backend, "THREAD_INVARIANT", False) and checked:
        results.append(thread_invariance(prepared, backend, exempt))
    own = case.spec.own_saved_state
    if own and any(fnmatch.fnmatchcase(case.id, p) for p in own.cases) \
            and all(prepared.inputs.get(name) is not None for name in own.outputs):
        results.append(own_saved_state(prepared, backend, tolerance, catalog))
    return results


def output_subset(prepared: Prepared, backend: Backend, exempt: AbstractSet[str] = frozenset()) -> Result:
    subset = request_for(prepared, backend.threads)
    full = dataclasses.replace(subset, outputs=(True,) * len(subset.outputs))
    return _same_bits(prepared, backend, OUTPUT_SUBSET, (subset, full), ("subset", "full"),
                      "differs from the same backend's full run", "bitwise equal to the same backend's full run", exempt)


def thread_invariance(prepared: Prepared, backend: Backend, exempt: AbstractSet[str] = frozenset()) -> Result:
    one, two = (dataclasses.replace(request_for(prepared, n), force_split=True) for n in INVARIANCE_THREADS)
    return _same_bits(prepared, backend, THREAD_INVARIANCE, (one, two), ("1-thread", "2-thread"),
                      "2 threads differ from 1 thread", "bitwise equal at 1 and 2 threads", exempt)


def _same_bits(prepared: Prepared, backend: Backend, check: str, requests, labels, differs: str,
               equal: str, exempt: AbstractSet[str] = frozenset()) -> Result:
    """A check that two runs of one backend return bitwise the same outputs (those the first requests, but the
    `exempt` ones: declared intermittent on this backend)."""
    result = new_result(prepared, backend.name)
    result.check = check
    outcomes = [_run(backend, r) for r in requests]
    runs: list[Outputs] = []
    for label, outcome in zip(labels, outcomes):
        if check == OUTPUT_SUBSET and label == "full" and isinstance(outcome, Rejected):
            # the subset ran; a refusal of the other outputs is judged by the cases that request them
            # (e.g. ort-autograd: ORT's builder refuses Pow's exponent gradient, declared there)
            result.status = "unsupported"
            result.detail = f"{check}: not checked: the full run was rejected: {outcome.message}"
            return result
        if not isinstance(outcome, Outputs):
            _not_run(result, f"{check}: the {label} run ", outcome)
            return result
        runs.append(outcome)
    problems, same = [], []
    for out, wanted, a, b in zip(prepared.case.spec.outputs, requests[0].outputs, runs[0].values, runs[1].values):
        if not wanted or out.name in exempt:
            continue
        difference = _bitwise_difference(a, b, *labels)
        (problems.append(f"{out.name}: {difference}") if difference else same.append(out.name))
    if problems:
        result.status, result.failure = "fail", "wrong_values"
        result.detail = f"{check}: {differs}: " + " | ".join(problems)
    else:
        result.detail = f"{check}: {', '.join(same)} {equal}"
    skipped = [o.name for o, wanted in zip(prepared.case.spec.outputs, requests[0].outputs) if wanted and o.name in exempt]
    if skipped:
        result.detail += f" ({', '.join(skipped)} not compared: declared intermittent on {backend.name})"
    return result


def own_saved_state(prepared: Prepared, backend: Backend, tolerance: Tolerance, catalog) -> Result:
    """Two steps, both needed for an end-to-end verdict: the backend's own saved state must be what the
    forward reference computes (a mismatched layout fails here), and the op fed with that state must
    match the reference applied to the same state (its tiny rounding differences are not charged)."""
    case, own = prepared.case, prepared.case.spec.own_saved_state
    if own is None:
        raise ValueError(f"{case.spec.op} has no own_saved_state section to check")
    where = f"own_saved_state ({own.op} on {backend.name}): "
    result = new_result(prepared, backend.name)
    result.check = OWN_SAVED_STATE
    try:
        producer = catalog.by_op(own.op, case.spec.domain)
    except Exception as e:  # noqa: BLE001 - the spec names an op the catalog lacks: a spec bug
        result.status, result.detail = "error", where + str(e)
        return result
    named = {i.name: prepared.inputs.get(i.name) for i in producer.inputs}
    attributes = {k: v for k, v in case.attributes.items() if k in producer.attributes}
    request = dataclasses.replace(request_for(prepared, backend.threads), spec=producer, inputs=list(named.values()),
                                  attributes=attributes, outputs=(True,) * len(producer.outputs), forward=None)
    outcome = _run(backend, request)
    if not isinstance(outcome, Outputs):
        _not_run(result, where, outcome)
        return result

    produced = {o.name: v for o, v in zip(producer.outputs, outcome.values)}
    reference = dict(zip((o.name for o in producer.outputs), evaluate(producer, named, attributes)))
    forward_tolerance = catalog.tolerance(producer, case.dtype)
    fed, problems = dict(prepared.inputs), []
    for name, source in own.outputs.items():
        value = produced.get(source)
        if value is None:
            problems.append(f"{source}: not returned")
            continue
        comparison = compare(value, reference[source], producer.dtype_of(producer.output(source), case.dtype),
                             forward_tolerance)
        if not comparison.passed:
            problems.append(f"{source}: " + "; ".join(comparison.problems))
        given = prepared.inputs.get(name)
        if given is None:
            raise ValueError(f"own_saved_state feeds {name}, which the case leaves out")
        fed[name] = value.astype(given.dtype, copy=False)
    if problems:
        result.status, result.failure = "fail", "wrong_values"
        result.detail = (where + f"the saved state differs from {own.op}'s reference (layout or values), so "
                         f"{case.spec.op} would get the wrong one: " + " | ".join(problems))
        return result

    try:
        expected = evaluate(case.spec, fed, case.attributes)
        allowance, notes = allowances(case.spec, fed, case.attributes, case.dtype, expected)
    except Exception as e:  # noqa: BLE001 - the reference cannot take this state: a reference bug, reported, never raised
        result.status, result.detail = "error", where + f"reference on the backend's state: {type(e).__name__}: {e}"
        return result
    result = judge(dataclasses.replace(prepared, inputs=fed, expected=expected, allowance=allowance,
                                       allowance_notes=notes), backend, tolerance)
    result.check = OWN_SAVED_STATE
    result.detail = where + f"{', '.join(own.outputs)} within tolerance of {own.op}'s reference; fed back: " + result.detail
    return result


def _run(backend: Backend, request) -> Outcome:
    try:
        return backend.run(request)
    except Exception as e:  # noqa: BLE001 - an adapter bug must not end the run
        return Rejected(f"backend raised {type(e).__name__}: {e}")


def _not_run(result: Result, what: str, outcome: Outcome) -> None:
    """A check whose extra backend call did not return outputs: scored like a valid case's call."""
    if isinstance(outcome, Unsupported):
        result.status, result.detail = "unsupported", what + outcome.reason
    elif isinstance(outcome, Crashed):
        result.status, result.failure = "crashed", "crash"
        result.detail = what + f"killed the worker with {outcome.signal}"
    elif isinstance(outcome, TimedOut):
        result.status, result.failure = "crashed", "hang"
        result.detail = what + f"gave {outcome}"
    else:
        result.status, result.failure = "fail", "rejects_valid"
        result.detail = what + f"was rejected: {getattr(outcome, 'message', outcome)}"


def _bitwise_difference(a: np.ndarray | None, b: np.ndarray | None, first: str, second: str) -> str | None:
    """None when a and b have the same dtype, shape and bytes; else what differs."""
    if a is None or b is None:
        return f"{first if a is None else second} run did not return it"
    if sequences.is_seq(a) or sequences.is_seq(b):  # a sequence: the same length and element shapes, then its elements
        if not (sequences.is_seq(a) and sequences.is_seq(b)) or sequences.shape_of(a) != sequences.shape_of(b):
            return f"sequence {sequences.json_shape(a)} vs {sequences.json_shape(b)} in the {second} run"
        if not a:
            return None
        if sequences.dtype_of(a) is None or sequences.dtype_of(a) != sequences.dtype_of(b):
            return f"sequence element dtypes differ in the {second} run"
        a, b = sequences.flat(a), sequences.flat(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)} in the {second} run"
    bits = np.dtype(f"u{a.dtype.itemsize}")  # compares NaN payloads and signed zeros too
    differ = np.ascontiguousarray(a).view(bits) != np.ascontiguousarray(b).view(bits)
    if not differ.any():
        return None
    with np.errstate(all="ignore"):
        gap = np.abs(a.astype(np.float64) - b.astype(np.float64))[differ]
    largest = float(gap[np.isfinite(gap)].max()) if np.isfinite(gap).any() else float("nan")
    return f"{int(differ.sum())} of {a.size} {dtypes.name_of(a.dtype)} elements differ (max |diff| {largest:.3g})"
