"""The one place that builds a case, runs a backend and judges the result.

`opconform run`, `run-onnx` and the generated pytest files all go through here, so a verdict means
the same thing wherever it is printed.

Statuses: pass; fail (an unexpected disagreement with the spec); divergent (a disagreement the spec
declares as a known divergence of that backend, with evidence); unsupported (the backend cannot run
this dtype or feature); crashed (the backend's process died or hung); error (the harness or the spec
could not build or check the case: always a bug to fix); waived (a failure, or a case not run, that
a backend team accepts in specs/_waivers/<backend>.yaml: counted apart, see harness.run.waivers).

Statuses and failure kinds are defined in harness.core.status; decisions read them, never `detail`.
`harness.run.case_checks.run_case` composes this module's judgement with the gradient check, the
self-consistency checks and the waivers: `opconform run` and the generated pytest files call it, so
a case gets the same status and detail wherever it runs.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from harness.backends.base import Backend, Crashed, ForwardCall, Outcome, Outputs, Rejected, Request, TimedOut, Unsupported
from harness.core import contract, sequences
from harness.core.cases import Case
from harness.core.compare import compare
from harness.core.dtypes import NUMPY
from harness.core.evaluate import evaluate
from harness.core.sequences import Value
from harness.core.shapes import CaseError
from harness.core.status import EXPLAINS, STATUSES, UNEXPECTED, Check, Failure, Problem, Status  # noqa: F401 (re-exported)
from harness.core.tensors import forward_call_parts, make_tensors, redraw_input
from harness.core.tolerance import Tolerance, allowances
from harness.run.diagnose import diagnose
from harness.run.probe import capability
from harness.spec.model import Divergence, InvalidGroup


@dataclass
class Prepared:
    """A case with its inputs and (for valid cases) its float64 reference outputs."""
    case: Case
    seed: int
    inputs: dict[str, Value | None] = field(default_factory=dict)  # a list: a sequence
    forward_inputs: dict[str, np.ndarray] = field(default_factory=dict)  # float64 values derived inputs came from
    expected: list[Value] | None = None
    allowance: list[np.ndarray | None] | None = None  # extra per-element error allowed (reductions)
    allowance_notes: list[str] | None = None  # provenance of each allowance, for the verdict
    problem: str | None = None  # why the harness could not build the case
    later: list[Call] = field(default_factory=list)  # a stateful case's calls 2..N (spec.state, `steps: N`)


@dataclass
class Call:
    """One later call of a stateful case: the inputs no earlier output feeds (redrawn, advanced or unchanged, in the
    case dtypes), and the float64 reference trajectory's outputs and allowances at that call."""
    inputs: dict[str, Value | None]
    expected: list[Value]
    allowance: list[np.ndarray | None]
    allowance_notes: list[str]


@dataclass
class Result:
    spec: str
    op: str
    backend: str
    dtype: str
    case: str
    group: str
    valid: bool
    tier: str
    seed: int
    params: dict
    attributes: dict
    input_shapes: dict
    status: str = Status.PASS.value  # a harness.core.status.Status value
    failure: str | None = None  # a harness.core.status.Failure value
    detail: str = ""  # for people only: no decision reads it
    divergence: str | None = None  # id of the known divergence that explains (or was expected to explain) it
    divergence_reproduced: bool | None = None  # with `divergence`: did it explain this result?
    outputs: dict = field(default_factory=dict)  # output name -> Comparison.to_json()
    waiver: str | None = None  # id of the waiver that waived it (or that an XPASS says to remove)
    check: str = Check.REFERENCE.value  # or gradient (harness.core.gradcheck), or a self-consistency check
    diagnosis: dict | None = None  # for wrong outputs: the alternative semantics they match (harness.run.diagnose)
    gradient: dict | None = None  # check gradient: per forward input, the Taylor-remainder sequence (harness.core.gradcheck)
    nodes: list[str] | None = None  # what computed the outputs, where the backend chose it (ort-autograd's gradient nodes)

    def to_json(self) -> dict:
        return {k: v.value if isinstance(v, Enum) else v for k, v in self.__dict__.items()}

    def set(self, status: Status, failure: Failure | None = None, detail: str | None = None) -> None:
        self.status = status.value
        self.failure = failure.value if failure is not None else None
        if detail is not None:
            self.detail = detail


def prepare(case: Case, global_seed: int = 0) -> Prepared:
    prepared = Prepared(case, case.seed(global_seed))
    try:
        prepared.inputs, prepared.forward_inputs = make_tensors(case, global_seed)
        if case.valid:
            problems = contract.input_problems(case.spec, prepared.inputs, case.attributes)
            if problems:
                raise CaseError("the spec generates an invalid case: " + "; ".join(problems))
            prepared.expected = evaluate(case.spec, prepared.inputs, case.attributes)
            _check_output_shapes(prepared, prepared.expected)
            prepared.allowance, prepared.allowance_notes = allowances(
                case.spec, prepared.inputs, case.attributes, case.dtype, prepared.expected)
            prepared.later = _trajectory(prepared, global_seed)
    except Exception as e:  # noqa: BLE001 - a spec or reference bug must not end the run; it becomes an error result
        prepared.problem = f"{type(e).__name__}: {e}" if not isinstance(e, CaseError) else str(e)
    return prepared


def _trajectory(prepared: Prepared, global_seed: int) -> list[Call]:
    """Calls 2..N of a stateful case: the reference carries its own float64 outputs (the math's trajectory); the
    other inputs are redrawn per call (state.redraw), advanced (state.advance) or kept."""
    case, state = prepared.case, prepared.case.spec.state
    if state is None or case.steps < 2:
        return []
    index = {o.name: k for k, o in enumerate(case.spec.outputs)}
    kept, expected, calls = dict(prepared.inputs), prepared.expected or [], []
    for call in range(2, case.steps + 1):
        for name, by in state.advance.items():
            if (value := kept.get(name)) is not None:
                kept[name] = np.asarray(value + by, dtype=value.dtype)  # (a 0-d sum is a NumPy scalar)
        for name in state.redraw:
            if (value := kept.get(name)) is not None:
                kept[name] = redraw_input(case, name, call, sequences.shape_of(value), global_seed)
        carried = {inp: expected[index[out]] for out, inp in state.carry.items()}
        expected = evaluate(case.spec, {**kept, **carried}, case.attributes)
        allowance, notes = allowances(case.spec, {**kept, **carried}, case.attributes, case.dtype, expected)
        calls.append(Call(dict(kept), expected, allowance, notes))
    return calls


def _check_output_shapes(prepared: Prepared, expected: list[np.ndarray]) -> None:
    spec = prepared.case.spec
    for out, value in zip(spec.outputs, expected):
        source = prepared.inputs.get(out.shape_from) if out.shape_from else None
        if source is not None and sequences.shape_of(value) != sequences.shape_of(source):
            raise CaseError(f"reference output {out.name} has shape {sequences.json_shape(value)} but the spec says "
                            f"it follows {out.shape_from} {sequences.json_shape(source)}")


def request_for(prepared: Prepared, threads: int = 1, poison_outputs: bool = False) -> Request:
    case = prepared.case
    wanted = set(case.requested_outputs)
    return Request(case.spec, case.dtype, [prepared.inputs.get(i.name) for i in case.spec.inputs],
                   case.attributes, tuple(o.name in wanted for o in case.spec.outputs), threads,
                   timeout=case.group.timeout, forward=_forward_call(prepared), poison_outputs=poison_outputs)


def _forward_call(prepared: Prepared) -> ForwardCall | None:
    if prepared.case.spec.forward is None:
        return None
    return ForwardCall(*forward_call_parts(prepared.case, prepared.inputs, prepared.forward_inputs),
                       export=prepared.case.group.export, seed=prepared.seed)


def new_result(prepared: Prepared, backend: str) -> Result:
    case = prepared.case
    return Result(case.spec.id, case.spec.op, backend, case.dtype, case.id, case.group.name, case.valid,
                  case.group.tier, prepared.seed, case.params, case.attributes,
                  {k: sequences.json_shape(v) for k, v in prepared.inputs.items()})


def judge(prepared: Prepared, backend: Backend, tolerance: Tolerance, diagnose_failures: bool = True) -> Result:
    """Run one prepared case on one backend and decide its status. A passing case that an intermittent known
    divergence covers is rerun up to its `reruns` times, asking for poisoned output buffers (Request.poison_outputs:
    what the kernel leaves unwritten shows as NaN): the first run that does not pass is the result (divergent
    where the declaration explains it, a failure otherwise); a case that passes them all passes, its declaration
    unreproduced (the gate calls it stale when no covered case reproduced it)."""
    result = _judge_once(prepared, backend, tolerance, diagnose_failures)
    reruns = _reruns(prepared, backend, result)
    for attempt in range(2, reruns + 2):
        again = _judge_once(prepared, backend, tolerance, diagnose_failures, poison_outputs=True)
        if again.status != Status.PASS:
            again.detail += f" [intermittent: run {attempt} of up to {reruns + 1}; the {attempt - 1} before passed]"
            return again
    if reruns:
        result.detail += f" [intermittent: passed all {reruns + 1} runs]"
    return result


def intermittent_divergences(case: Case, backend: str, same_kernels_as: str | None = None) -> list[Divergence]:
    """The intermittent known divergences that cover this case on this backend (or the one whose kernels it runs)."""
    return [d for d in covering_divergences(case, backend, same_kernels_as) if d.intermittent is not None]


def unrepeatable_outputs(case: Case, backend: str, same_kernels_as: str | None = None) -> set[str]:
    """The outputs this backend need not return bitwise the same from run to run for this case: those an
    intermittent divergence covering it on this backend (or the one whose kernels it runs) names, all of them when
    it names none. Other backends' declarations waive nothing here."""
    names: set[str] = set()
    for d in intermittent_divergences(case, backend, same_kernels_as):
        names |= set(d.outputs or [o.name for o in case.spec.outputs])
    return names


def _reruns(prepared: Prepared, backend: Backend, result: Result) -> int:
    """How many more runs a first result gets: a pass whose recorded, unreproduced declaration is intermittent."""
    if result.status != Status.PASS or not result.divergence or result.divergence_reproduced:
        return 0
    return max((d.intermittent.reruns for d in intermittent_divergences(prepared.case, backend.name, backend.divergences_from)
                if d.id == result.divergence and d.intermittent is not None), default=0)


def _judge_once(prepared: Prepared, backend: Backend, tolerance: Tolerance, diagnose_failures: bool,
                poison_outputs: bool = False) -> Result:
    result = new_result(prepared, backend.name)
    if prepared.problem:
        result.set(Status.ERROR, detail=prepared.problem)
        return result
    support = capability(backend, prepared.case.spec, prepared.case.dtype)
    if support.gates:  # never run, so never passed: even where the backend would run it silently
        result.set(Status.UNSUPPORTED, detail=f"probe: {support.status}: {support.reason}")
        return result
    try:
        outcome = backend.run(request_for(prepared, backend.threads, poison_outputs))
    except Exception as e:  # noqa: BLE001 - a backend adapter bug: report it, keep the run going
        result.set(Status.ERROR, detail=f"backend raised {type(e).__name__}: {e}")
        return result
    prepared = _judged_by(prepared, backend, outcome)
    if prepared.problem:
        result.set(Status.ERROR, detail=prepared.problem)
        return result
    score(prepared, outcome, tolerance, result)
    if prepared.later and result.status == Status.PASS and isinstance(outcome, Outputs):
        prepared, outcome = _run_later_calls(prepared, backend, outcome, tolerance, result, poison_outputs)
    if diagnose_failures and result.failure in (Failure.WRONG_VALUES, Failure.WRONG_SHAPE) \
            and isinstance(outcome, Outputs):
        result.diagnosis = diagnose(prepared, outcome.values, tolerance)
        if result.diagnosis and result.diagnosis["matches"]:  # say first what the kernel computes instead
            result.detail = f"{result.diagnosis['summary']} | {result.detail}"
        elif result.diagnosis:
            result.detail += f" | diagnosis: {result.diagnosis['summary']}"
    apply_divergences(prepared, result, backend.divergences_from, backend.inherited_must_reproduce)
    return result


def carried_allowance(tolerance: Tolerance, earlier: list[list[np.ndarray]], allowances_: list[list[np.ndarray | None]],
                      index: int, shape: tuple[int, ...]) -> np.ndarray | float:
    """What call k of a stateful case may err beyond its own one-call tolerance (spec.state.error_model): the
    one-call tolerances of calls 1..k-1 summed element by element (atol + rtol * |expected| of each call, plus its
    reduction allowance), since each call rounds once relative to its own values and carries the earlier errors on."""
    extra: np.ndarray | float = tolerance.atol * len(earlier)
    for expected, allowance in zip(earlier, allowances_):
        value, more = sequences.flat(expected[index]), allowance[index]  # a sequence's allowance is flat too
        if value.shape != shape:  # an output whose shape changes from call to call carries nothing elementwise
            continue
        extra = extra + tolerance.rtol * np.where(np.isfinite(value), np.abs(value), 0.0)
        if more is not None:
            extra = extra + np.where(np.isfinite(more), more, 0.0)
    return extra


def _run_later_calls(prepared: Prepared, backend: Backend, first: Outputs, tolerance: Tolerance, result: Result,
                     poison_outputs: bool) -> tuple[Prepared, Outcome]:
    """Calls 2..N of a stateful case on the backend, each fed the backend's own carried outputs of the call before,
    each judged against the reference trajectory with the tolerances of the calls before added (carried_allowance).
    The result becomes the first call that does not pass (its detail says which), or says every call passed;
    returns that call's case and outcome (for the diagnosis)."""
    case, state = prepared.case, prepared.case.spec.state
    assert state is not None  # prepared.later is only filled for a stateful spec
    index = {o.name: k for k, o in enumerate(case.spec.outputs)}
    outcome: Outcome = first
    earlier = [prepared.expected or []]
    earlier_allowances: list[list[np.ndarray | None]] = [prepared.allowance or []]
    note = f" + calls 1..k-1's (state: {len(prepared.later) + 1} calls)"
    for call, later in enumerate(prepared.later, 2):
        assert isinstance(outcome, Outputs)
        inputs = {**later.inputs, **{inp: outcome.values[index[out]] for out, inp in state.carry.items()}}
        request = replace(request_for(prepared, backend.threads, poison_outputs),
                          inputs=[inputs.get(i.name) for i in case.spec.inputs], forward=None)
        try:
            outcome = backend.run(request)
        except Exception as e:  # noqa: BLE001 - a backend adapter bug: report it, keep the run going
            result.set(Status.ERROR, detail=f"call {call} of {case.steps}: backend raised {type(e).__name__}: {e}")
            return prepared, outcome
        flats = [sequences.flat(e) for e in later.expected]
        allowance: list[np.ndarray | None] = [
            np.broadcast_to((a if a is not None else 0.0) + carried_allowance(tolerance, earlier, earlier_allowances, k, e.shape),
                            e.shape).astype(np.float64) for k, (e, a) in enumerate(zip(flats, later.allowance))]
        at_call = replace(prepared, inputs=inputs, expected=later.expected, allowance=allowance,
                          allowance_notes=[n + note for n in later.allowance_notes], later=[])
        judged = new_result(at_call, backend.name)
        score(at_call, outcome, tolerance, judged)
        if judged.status != Status.PASS:
            result.set(Status(judged.status), Failure(judged.failure) if judged.failure else None,
                       f"call {call} of {case.steps} (calls 1-{call - 1} passed, each fed the call before's "
                       f"{', '.join(state.carry)}): {judged.detail}")
            result.outputs, result.nodes = judged.outputs, judged.nodes
            return at_call, outcome
        if call == case.steps:
            result.outputs = judged.outputs
            result.detail = f"all {case.steps} calls {judged.detail} (at call {call})"
        earlier.append(later.expected)
        earlier_allowances.append(later.allowance)
    return prepared, outcome


def _judged_by(prepared: Prepared, backend: Backend, outcome: Outcome) -> Prepared:
    """The case as this outcome is judged: with the forward op's draws the backend's graph made (Dropout's mask)
    in place of the case's, and by forward.derivative where a training graph's gradients must be the derivative
    although the gradient op's contract is not (derivative_differs)."""
    case = prepared.case
    draws = outcome.draws if isinstance(outcome, Outputs) else {}
    derivative = (case.spec.forward.derivative if backend.DIFFERENTIATES_FORWARD and case.group.derivative_differs
                  and case.spec.forward else None)
    if not case.valid or not (draws or derivative):
        return prepared
    by_forward_name = {(i.forward_name or i.name): i.name for i in case.spec.inputs}
    inputs = {**prepared.inputs, **{by_forward_name.get(name, name): value for name, value in draws.items()}}
    judged = replace(prepared, inputs=inputs)
    try:
        if derivative and case.spec.forward:  # a function of the incoming gradients and the forward inputs
            grads = {i.name: inputs[i.name] for i in case.spec.inputs if i.role == "grad_output"}
            args = {**grads, **{name: prepared.forward_inputs.get(name) for name in case.spec.forward.inputs}}
            judged.expected = evaluate(case.spec, args, case.attributes, derivative)
        else:
            judged.expected = evaluate(case.spec, inputs, case.attributes)
        judged.allowance, judged.allowance_notes = allowances(case.spec, inputs, case.attributes, case.dtype,
                                                              judged.expected)
    except Exception as e:  # noqa: BLE001 - a reference that fails here: an error result, not the end of the run
        how = f"forward.derivative {derivative}" if derivative else f"the reference on {backend.name}'s own draw of {', '.join(draws)}"
        judged.problem = f"{how}: {type(e).__name__}: {e}"
    return judged


def score(prepared: Prepared, outcome: Outcome, tolerance: Tolerance, result: Result) -> None:
    """The status and failure kind of one backend outcome, before declared divergences."""
    case = prepared.case
    if isinstance(outcome, Unsupported):
        result.set(Status.UNSUPPORTED, detail=outcome.reason)
    elif isinstance(outcome, Crashed):
        result.set(Status.CRASHED, Failure.CRASH, outcome.describe())
    elif isinstance(outcome, TimedOut):
        if case.group.timeout is not None and outcome.seconds == case.group.timeout:  # the group's own, shorter limit
            outcome = TimedOut(outcome.seconds, f"`timeout` of group {case.group.name}")
        result.set(Status.CRASHED, Failure.HANG, f"{result.backend}: {outcome}; killed")
    elif isinstance(outcome, Rejected):
        if case.valid:
            result.set(Status.FAIL, Failure.REJECTS_VALID, f"rejected a valid input: {outcome.message}")
        else:
            result.detail = f"rejected as expected: {outcome.message}"
    elif isinstance(case.group, InvalidGroup):  # not case.valid
        result.set(Status.FAIL, Failure.ACCEPTS_INVALID,
                   f"accepted an invalid input ({case.group.why}) and returned outputs")
    else:
        result.nodes = list(outcome.nodes) or None
        _score_outputs(prepared, outcome, tolerance, result)


def _score_outputs(prepared: Prepared, outcome: Outputs, tolerance: Tolerance, result: Result) -> None:
    case, spec = prepared.case, prepared.case.spec
    expected_all, allowance, notes = prepared.expected, prepared.allowance, prepared.allowance_notes
    if expected_all is None or allowance is None or notes is None:  # prepare() gives a valid case all three
        raise ValueError(f"case {case.id} has no reference outputs and allowances to score against")
    problems, failure = [], None
    for index, (out, expected, actual) in enumerate(zip(spec.outputs, expected_all, outcome.values)):
        if out.name not in case.requested_outputs:
            if actual is not None:
                failure = failure or Failure.WRONG_SHAPE
                problems.append(f"{out.name}: returned although not requested")
            continue
        if actual is None:
            failure = Failure.WRONG_SHAPE
            problems.append(f"{out.name}: requested but not returned")
            continue
        want_dtype = spec.dtype_of(out, case.dtype)
        if form := sequences.form_problem(spec.is_sequence(out), actual, expected):
            failure = failure or Failure.WRONG_SHAPE
            problems.append(f"{out.name}: {form}")
            continue
        output_tolerance = tolerance.noted(notes[index])
        # a sequence is judged as its elements joined, its length and element shapes having agreed (form_problem)
        layout = sequences.shape_of(expected) if spec.is_sequence(out) else None
        comparison = compare(sequences.flat(actual), sequences.flat(expected), want_dtype, output_tolerance,
                             allowance[index], layout)
        got_dtype = NUMPY[want_dtype] if sequences.is_seq(actual) and not actual else sequences.dtype_of(actual)
        if got_dtype != NUMPY[want_dtype]:
            comparison.fail(Problem.DTYPE, f"dtype {got_dtype}, expected {want_dtype}", first=True)
        result.outputs[out.name] = comparison.to_json()
        if not comparison.passed:
            wrong_form = {Problem.SHAPE.value, Problem.DTYPE.value} & set(comparison.kinds)
            failure = failure or (Failure.WRONG_SHAPE if wrong_form else Failure.WRONG_VALUES)
            problems.append(f"{out.name}: " + "; ".join(comparison.problems))
    if problems:
        result.set(Status.FAIL, failure, " | ".join(problems))
    else:
        worst = max(result.outputs.values(), key=lambda o: o["budget_used"] if isinstance(o["budget_used"], float) else 0.0,
                    default=None)
        budget = worst["budget_used"] if worst and isinstance(worst["budget_used"], float) else 0.0
        source = worst["tolerance"]["source"] if worst else tolerance.source  # with any reduction term
        result.detail = f"within tolerance (x{budget:.2g} of {source})"


def matching_divergences(prepared: Prepared, backend: str, same_kernels_as: str | None = None) -> list[Divergence]:
    """The spec's known divergences that cover this case on this backend (or on the backend whose
    kernels it runs, Backend.divergences_from): backend, dtype and case-id glob."""
    return covering_divergences(prepared.case, backend, same_kernels_as)


def covering_divergences(case: Case, backend: str, same_kernels_as: str | None = None) -> list[Divergence]:
    """matching_divergences for a case not yet prepared."""
    return [d for d in case.spec.known_divergences
            if d.backend in (backend, same_kernels_as) and (not d.dtypes or case.dtype in d.dtypes)
            and any(fnmatch.fnmatchcase(case.id, pattern) for pattern in d.cases)]


def explains(divergence: Divergence, result: Result) -> bool:
    """A declared divergence explains a result when it declares the observed failure kind and every
    output that failed is one it names."""
    failing = {name for name, o in result.outputs.items() if not o["passed"]}
    kinds = {kind.value for r in divergence.results for kind in EXPLAINS[r]}
    return result.failure in kinds and (not divergence.outputs or failing <= set(divergence.outputs))


def apply_divergences(prepared: Prepared, result: Result, same_kernels_as: str | None = None,
                      inherited_must_reproduce: bool = True) -> None:
    declared = matching_divergences(prepared, result.backend, same_kernels_as)
    if not inherited_must_reproduce and result.status == Status.PASS:
        declared = [d for d in declared if d.backend == result.backend]
    if not declared or (result.status == Status.UNSUPPORTED and result.failure is None):
        return  # a case the backend cannot run neither shows nor refutes a divergence
    if result.status == Status.PASS:  # an intermittent declaration first: it is the one a rerun may show
        shown = next((d for d in declared if d.intermittent is not None), declared[0])
        result.divergence, result.divergence_reproduced = shown.id, False
        result.detail += f" [known divergence {shown.id} did not reproduce]"
        return
    for d in declared:
        if explains(d, result):
            result.divergence, result.divergence_reproduced = d.id, True
            by_design = result.failure == Failure.REJECTS_VALID and "unsupported" in d.results
            status = Status.UNSUPPORTED if by_design else Status.DIVERGENT
            result.status = status.value
            result.detail = f"known divergence {d.id}: {d.summary} | observed: {result.detail}"
            return
    result.divergence, result.divergence_reproduced = declared[0].id, False
    result.detail += f" [declared as {declared[0].id} ({', '.join(declared[0].results)}), but observed {result.failure}]"


class CaseNotFound(LookupError):
    pass


def find_case(cases: dict[str, Case], spec_id: str, dtype: str, case_id: str) -> Case:
    """The case `dtype-case_id` among a spec's cases (full id -> Case), or a clear error."""
    case = cases.get(f"{dtype}-{case_id}")
    if case is None:
        raise CaseNotFound(f"{spec_id} has no case {dtype}-{case_id}: the spec changed since this test was "
                           f"generated; run `opconform gen-tests`")
    return case
