"""Stateful specs (spec.state, the `steps` case param): a case runs N calls, each fed the carried outputs of the
call before (the backend its own, the reference the float64 trajectory's), the redrawn inputs drawn afresh per
call, the advanced ones incremented; every call is judged at k times the one-call tolerance.

A toy accumulator spec (out = buffer + value, buffer carried, value redrawn, a step counter advanced) is enough:
an accumulator that overwrites where it should add passes its first call and fails its second, which only a
trajectory shows."""
import copy
from dataclasses import replace

import numpy as np
import pytest

from harness.backends.base import Backend, Outputs, Request
from harness.backends.reference import ReferenceBackend
from harness.core import spec_checks
from harness.core.cases import expand
from harness.core.tolerance import Tolerance
from harness.run.engine import judge, prepare
from harness.spec.model import Spec

TOL = Tolerance(1e-6, 1e-5, "test")


def accumulate(buffer, value, count):
    """The toy op: the running sum and the number of values summed so far (count is the advanced input)."""
    return np.asarray(buffer, np.float64) + np.asarray(value, np.float64), np.asarray(count, np.float64) + 0.0


SPEC = {
    "schema_version": 1, "op": "ToyAccumulate", "summary": "A running sum, for the stateful tests.",
    "formula": "out = buffer + value", "reference": "test_stateful:accumulate",
    "type_constraints": {"T": {"types": ["float32", "float64", "float16"]}},
    "inputs": [{"name": "buffer", "type": "T", "role": "forward_input"},
               {"name": "value", "type": "T", "role": "forward_input", "shape_from": "buffer"},
               {"name": "count", "type": "T", "role": "forward_input", "shape": []}],
    "outputs": [{"name": "out", "type": "T", "shape_from": "buffer"}, {"name": "seen", "type": "T"}],
    "state": {"carry": {"out": "buffer"}, "redraw": ["value"], "advance": {"count": 1},
              "error_model": "each call rounds one addition; earlier errors are carried unchanged"},
    "cases": {"seed": 1, "dtypes": ["float32"],
              "inputs": {"buffer": {"values": [0.0]}, "count": {"values": [1.0]}},
              "groups": [{"name": "trajectory", "dtypes": ["float32", "float16"],
                          "params": {"shape": [[5]], "steps": [1, 3, 10]}}]},
}


def check(spec_: Spec):
    return spec_checks.check(spec_, packages=("reference", "test_stateful"))


def spec(**changes) -> Spec:
    data = copy.deepcopy(SPEC)
    data.update(changes)
    return Spec.model_validate(data)


def case(steps: int, dtype: str = "float32"):
    return next(c for c in expand(spec()) if c.params["steps"] == steps and c.dtype == dtype)


class Overwrites(Backend):
    """An accumulator that overwrites where it should add: right whenever the buffer holds 0 (the first call)."""
    name = "overwrites"

    def run(self, request: Request):
        _, value, count = request.inputs
        return Outputs([value.copy(), count.copy()])


class Drifts(Backend):
    """The reference's outputs plus an error of `factor(k)` times the one-call tolerance added at call k (and
    carried on with the buffer)."""
    name = "drifts"

    def __init__(self, factor):
        self.factor, self.calls = factor, 0

    def run(self, request: Request):
        self.calls += 1
        outputs = ReferenceBackend().run(request).values
        out = outputs[0].astype(np.float64)
        allowed = TOL.atol + TOL.rtol * np.abs(out)
        return Outputs([(out + self.factor(self.calls) * allowed).astype(outputs[0].dtype), outputs[1]])


class Seen(Backend):
    """The reference's outputs, `seen` off by `error` at call `at`."""
    name = "seen"

    def __init__(self, at, error):
        self.at, self.error, self.calls = at, error, 0

    def run(self, request: Request):
        self.calls += 1
        out, seen = ReferenceBackend().run(request).values
        return Outputs([out, (seen + self.error).astype(seen.dtype) if self.calls == self.at else seen])


def test_the_reference_trajectory_carries_float64_sums_redraws_and_advances():
    prepared = prepare(case(10))
    assert prepared.problem is None and len(prepared.later) == 9
    values = [prepared.inputs["value"]] + [call.inputs["value"] for call in prepared.later]
    assert all(not np.array_equal(a, b) for a, b in zip(values, values[1:]))  # a fresh draw per call
    assert all(v.dtype == np.float32 for v in values)
    total = np.sum([v.astype(np.float64) for v in values], axis=0)
    np.testing.assert_array_equal(prepared.later[-1].expected[0], total)  # float64 sums, never rounded between calls
    assert [float(call.inputs["count"]) for call in prepared.later] == [float(k) for k in range(2, 11)]
    assert prepared.later[-1].expected[1] == 10.0
    assert prepare(case(1)).later == []


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_reference_backend_follows_its_own_trajectory_within_the_growing_tolerance(dtype):
    result = judge(prepare(case(10, dtype)), ReferenceBackend(), TOL if dtype == "float32" else Tolerance(1e-3, 1e-2, "t"))
    assert result.status == "pass", result.detail
    assert result.detail.startswith("all 10 calls within tolerance") and "(at call 10)" in result.detail


def test_an_accumulator_that_overwrites_passes_one_call_and_fails_the_second():
    assert judge(prepare(case(1)), Overwrites(), TOL).status == "pass"
    result = judge(prepare(case(3)), Overwrites(), TOL, diagnose_failures=False)
    assert result.status == "fail" and result.failure == "wrong_values"
    assert result.detail.startswith("call 2 of 3 (calls 1-1 passed, each fed the call before's out): out:")
    assert not result.outputs["out"]["passed"] and result.outputs["seen"]["passed"]


def test_call_k_allows_the_one_call_tolerances_of_calls_1_to_k_summed_and_no_more():
    # a drift of 0.9 one-call tolerances per call, carried on in the buffer, stays within the summed tolerances
    within = judge(prepare(case(3)), Drifts(lambda k: 0.9), TOL)
    assert within.status == "pass", within.detail
    assert "+ calls 1..k-1's (state: 3 calls)" in within.detail
    assert judge(prepare(case(3)), Drifts(lambda k: 1.1 if k == 1 else 0.0), TOL, diagnose_failures=False).status == "fail"
    # seen (= the count, not carried) is 2 at call 2: allowed atol + rtol * 1 (call 1) + atol + rtol * 2 (call 2)
    allowed = 2 * TOL.atol + 3 * TOL.rtol
    for factor, status in ((0.95, "pass"), (1.05, "fail")):
        result = judge(prepare(case(3)), Seen(2, factor * allowed), TOL, diagnose_failures=False)
        assert result.status == status, (factor, result.detail)
    assert result.detail.startswith("call 2 of 3") and not result.outputs["seen"]["passed"]


@pytest.mark.parametrize("change, field, words", [
    ({"state": None}, "params.steps", "needs a `state:` section"),
    ({"state": {**SPEC["state"], "carry": {"nope": "buffer"}}}, "state.carry.nope", "nope"),
    ({"state": {**SPEC["state"], "carry": {"out": "nope"}}}, "state.carry.out", "nope"),
    ({"state": {**SPEC["state"], "redraw": ["buffer"]}}, "state.redraw.buffer", "carried from an output"),
    ({"state": {**SPEC["state"], "advance": {"nope": 1}}}, "state.advance.nope", "nope"),
])
def test_a_state_section_that_names_the_wrong_things_is_a_spec_error(change, field, words):
    problems = check(spec(**change))
    assert any(f.endswith(field) and words in m for f, m in problems), problems


def test_steps_must_be_positive_and_carried_outputs_requested():
    bad = copy.deepcopy(SPEC)
    bad["cases"]["groups"][0]["params"] = {"shape": [[5]], "steps": [0]}
    assert any("1 or more" in m for _, m in check(Spec.model_validate(bad)))
    bad["cases"]["groups"][0]["params"] = {"shape": [[5]], "steps": [2], "outputs": [["seen"]]}
    assert any("out feed the next call" in m for _, m in check(Spec.model_validate(bad)))
    assert check(spec()) == []


def test_a_carried_output_must_have_its_inputs_type():
    data = copy.deepcopy(SPEC)
    data["type_constraints"]["U"] = {"types": ["float32"]}
    data["outputs"][0]["type"] = "U"
    assert any("must have its input's type" in m for _, m in check(Spec.model_validate(data)))


def test_the_reference_backend_is_fed_its_own_rounded_outputs():
    """A backend's later calls take the backend's outputs (rounded to the dtype), not the reference's float64 values."""
    seen = []

    class Recording(ReferenceBackend):
        def run(self, request):
            seen.append(request.named_inputs()["buffer"].copy())
            return super().run(request)

    prepared = prepare(case(3, "float16"))
    assert judge(prepared, Recording(), Tolerance(1e-3, 1e-2, "t")).status == "pass"
    assert len(seen) == 3 and all(b.dtype == np.float16 for b in seen)
    first = (prepared.inputs["buffer"].astype(np.float64) + prepared.inputs["value"]).astype(np.float16)
    np.testing.assert_array_equal(seen[1], first)
    assert replace(prepared, later=[]).later == []
