"""Sequence inputs and outputs (a type variable with `sequence: true`: ONNX's seq(tensor(T)), the parameter lists of
AdamWOptimizer, SGDOptimizerV2 and InplaceClipGradNorm). A value is a list of tensors; its shape the list of their
shapes. Judging compares a sequence's elements joined, only after its length and every element's shape agree, so a
list one tensor short, a tensor of another shape, a tensor where a list belongs or one wrong value in the second
tensor each fail with the right failure kind. A toy spec (sums[i] = xs[i] + ys[i], total = the sum of every value)
is enough."""
import copy

import numpy as np
import pytest

from harness.backends import onnx_model
from harness.backends.base import Backend, Outputs, Rejected, Request
from harness.backends.reference import ReferenceBackend
from harness.core import contract, sequences, spec_checks
from harness.core.cases import expand
from harness.core.tensors import make_inputs
from harness.core.tolerance import Tolerance
from harness.run.engine import judge, prepare, request_for
from harness.run.self_consistency import _bitwise_difference
from harness.spec.model import Spec

TOL = Tolerance(1e-6, 1e-5, "test")


def add_lists(xs, ys):
    """The toy op: the lists added tensor by tensor, and the sum of all their values."""
    sums = [np.asarray(x, np.float64) + np.asarray(y, np.float64) for x, y in zip(xs, ys)]
    return sums, np.asarray(sum(float(np.sum(s)) for s in sums))


SPEC = {
    "schema_version": 1, "op": "ToyAddLists", "summary": "Two lists added, for the sequence tests.",
    "formula": "sums[i] = xs[i] + ys[i]", "reference": "test_sequences:add_lists",
    "type_constraints": {"S": {"types": ["float32", "float64"], "sequence": True}, "T": {"types": ["float32", "float64"]}},
    "inputs": [{"name": "xs", "type": "S", "role": "forward_input"},
               {"name": "ys", "type": "S", "role": "forward_input", "shape_from": "xs"}],
    "outputs": [{"name": "sums", "type": "S", "shape_from": "xs"}, {"name": "total", "type": "T"}],
    "state": {"carry": {"sums": "xs"}, "redraw": ["ys"], "error_model": "one rounding a call, carried unchanged"},
    "cases": {"seed": 1, "dtypes": ["float32"],
              "groups": [{"name": "lists", "params": {"shape": [[[2, 3], [4]], [[2, 3], [4], [3], [1, 1]], [[3], [3]], []]}},
                         {"name": "trajectory", "params": {"shape": [[[3], [2, 2]]], "steps": [5]}}]},
}


def spec(**changes) -> Spec:
    data = copy.deepcopy(SPEC)
    data.update(changes)
    return Spec.model_validate(data)


def case(shape, steps: int = 1, spec_: Spec | None = None):
    return next(c for c in expand(spec_ or spec()) if c.params["shape"] == shape and c.steps == steps)


class Edits(Backend):
    """The reference's outputs, then `edit(values)` applied (at call `at` only when given)."""
    name = "edits"

    def __init__(self, edit, at: int | None = None):
        self.edit, self.at, self.calls = edit, at, 0

    def run(self, request: Request):
        self.calls += 1
        values = ReferenceBackend().run(request).values
        return Outputs(self.edit(values) if self.at in (None, self.calls) else values)


def test_a_sequence_input_is_a_list_of_tensors_each_from_a_stream_of_its_own():
    short, again = make_inputs(case([[2, 3], [4]])), make_inputs(case([[2, 3], [4]]))
    assert [t.shape for t in short["xs"]] == [(2, 3), (4,)] and all(t.dtype == np.float32 for t in short["xs"])
    assert sequences.shape_of(short["ys"]) == ((2, 3), (4,))
    assert all(np.array_equal(a, b) for a, b in zip(short["xs"], again["xs"]))  # fixed seeds per case id
    twins = make_inputs(case([[3], [3]]))["xs"]
    assert not np.array_equal(twins[0], twins[1])  # each element a draw of its own (a stream per element)
    assert not np.array_equal(short["xs"][0], short["ys"][0])
    assert make_inputs(case([]))["xs"] == []  # an empty list is a list


def test_the_reference_judges_itself_within_tolerance_on_every_list():
    for c in expand(spec()):
        result = judge(prepare(c), ReferenceBackend(), TOL)
        assert result.status == "pass", (c.id, result.detail)
    assert prepare(case([[2, 3], [4]])).expected[0][1].shape == (4,)


@pytest.mark.parametrize("edit, failure, words", [
    (lambda v: [[v[0][0], v[0][1] + np.float32(1e-3)], v[1]], "wrong_values", "sums: 4 of 10 element(s) outside tolerance"),
    (lambda v: [v[0][:1], v[1]], "wrong_shape", "a sequence of 1 tensors, expected 2"),
    (lambda v: [[v[0][0], v[0][1][:3]], v[1]], "wrong_shape", "element 1 has shape [3], expected [4]"),
    (lambda v: [v[0][0], v[1]], "wrong_shape", "returned a tensor, expected a sequence of tensors"),
    (lambda v: [v[1], [v[1]]], "wrong_shape", "returned a sequence, expected a tensor"),
    (lambda v: [[t.astype(np.float64) for t in v[0]], v[1]], "wrong_shape", "dtype float64, expected float32"),
])
def test_a_sequence_output_fails_on_its_length_an_element_shape_its_form_dtype_or_one_value(edit, failure, words):
    result = judge(prepare(case([[2, 3], [4]])), Edits(edit), TOL, diagnose_failures=False)
    assert (result.status, result.failure) == ("fail", failure), result.detail
    assert words in result.detail
    if failure == "wrong_values":  # the worst element named in its tensor: [tensor, index]
        assert result.outputs["sums"]["worst"]["index"][0] == 1 and "worst at [1, " in result.detail


def test_an_empty_sequence_passes_when_empty_was_expected_and_fails_otherwise():
    assert judge(prepare(case([])), ReferenceBackend(), TOL).status == "pass"
    added = judge(prepare(case([])), Edits(lambda v: [[np.zeros(1, np.float32)], v[1]]), TOL, diagnose_failures=False)
    assert added.failure == "wrong_shape" and "a sequence of 1 tensors, expected 0" in added.detail


def test_a_carried_sequence_is_judged_at_every_call_of_a_trajectory():
    prepared = prepare(case([[3], [2, 2]], steps=5))
    assert len(prepared.later) == 4 and sequences.is_seq(prepared.later[0].inputs["ys"])
    assert judge(prepared, ReferenceBackend(), TOL).status == "pass"
    late = judge(prepare(case([[3], [2, 2]], steps=5)), Edits(lambda v: [[v[0][0] + 1, v[0][1]], v[1]], at=3), TOL,
                 diagnose_failures=False)
    assert late.status == "fail" and late.detail.startswith("call 3 of 5 (calls 1-2 passed")


def test_the_contract_rejects_a_tensor_for_a_list_mixed_element_dtypes_and_unequal_lists():
    s, good = spec(), make_inputs(case([[2, 3], [4]]))
    assert contract.input_problems(s, good, {}) == []
    tensor = {**good, "xs": good["xs"][0]}
    assert "input xs must be a sequence of tensors" in contract.input_problems(s, tensor, {})
    mixed = {**good, "ys": [good["ys"][0], good["ys"][1].astype(np.float64)]}
    assert "input ys is a sequence whose elements' dtypes differ" in contract.input_problems(s, mixed, {})
    short = {**good, "ys": good["ys"][:1]}
    assert contract.input_problems(s, short, {}) == [
        "input ys has shape [[2, 3]] but must equal xs's shape [[2, 3], [4]]"]
    request = request_for(prepare(case([[2, 3], [4]])))
    request.inputs[1] = good["ys"][:1]
    assert isinstance(ReferenceBackend().run(request), Rejected)


def test_thread_invariance_compares_sequences_element_by_element_and_bit_by_bit():
    a = [np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32)]
    assert _bitwise_difference(a, [t.copy() for t in a], "1-thread", "2-thread") is None
    b = [a[0], np.array([-0.0 + 3.0000002], np.float32)]
    assert "1 of 3 float32 elements differ" in _bitwise_difference(a, b, "1-thread", "2-thread")
    assert "sequence" in _bitwise_difference(a, a[:1], "1-thread", "2-thread")
    assert "sequence" in _bitwise_difference(a, a[0], "1-thread", "2-thread")


def test_the_onnx_model_declares_sequences_and_feeds_copies():
    from onnx import load_from_string

    request = request_for(prepare(case([[2, 3], [4]])))
    model = onnx_model.build(request)
    graph = load_from_string(model.model).graph
    assert [i.type.WhichOneof("value") for i in graph.input] == ["sequence_type", "sequence_type"]
    assert graph.output[0].type.WhichOneof("value") == "sequence_type"
    assert graph.output[1].type.WhichOneof("value") == "tensor_type"
    fed = model.feeds["xs"]
    assert isinstance(fed, list) and all(f is not t and np.array_equal(f, t) for f, t in zip(fed, request.inputs[0]))


def test_validate_asks_a_sequence_shape_param_for_a_list_of_shapes():
    bad = copy.deepcopy(SPEC["cases"])
    bad["groups"] = [{"name": "flat", "params": {"shape": [[2, 3]]}}]
    problems = spec_checks.check(spec(cases=bad), packages=("reference", "test_sequences"))
    assert any("element 0: 2 is not a shape" in message for _, message in problems), problems
