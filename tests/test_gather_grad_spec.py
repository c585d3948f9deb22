"""GatherGrad and GatherElementsGrad through the harness: the `shape_of` generator (an integer input whose
values are a forward-only input's shape), index bounds read from a forward-only input at the axis attribute,
the case dtype taken from dY when the op's first input is an integer one, and the gradient check catching a
scatter that overwrites duplicates instead of summing them."""
import copy

import numpy as np
import pytest

from harness.core import generators, spec_checks
from harness.core.cases import expand
from harness.core.contract import input_problems
from harness.core.gradcheck import gradient_check
from harness.core.shapes import CaseError
from harness.core.tensors import forward_call_parts, make_tensors
from harness.spec.model import Spec
from reference.ops.gather_grad import gather_grad


def gather_grad_overwriting_duplicates(shape, indices, dY, *, axis=0):
    """dX[indices[j]] = dY[j]: the last duplicate wins, the others are lost."""
    dims = tuple(int(d) for d in shape)
    a = axis % len(dims)
    dx = np.zeros(dims)
    moved, grads = np.moveaxis(dx, a, 0), np.moveaxis(np.asarray(dY, np.float64), a, 0)
    idx = np.asarray(indices).astype(np.int64).ravel() % dims[a]
    moved[idx] = grads.reshape(len(idx), *moved.shape[1:])
    return dx


def cases(catalog, op, group):
    return [c for c in expand(catalog.by_op(op), "nightly") if c.group.name == group]


@pytest.mark.parametrize("op", ["GatherGrad", "GatherElementsGrad"])
def test_shape_holds_the_forward_inputs_shape_and_indices_follow_the_axis(catalog, op):
    axes = cases(catalog, op, "axes")
    assert {c.params["axis"] for c in axes} >= {0, 1, -1}
    for case in axes:
        inputs, forward_inputs = make_tensors(case)
        x_shape = forward_inputs["X"].shape
        assert inputs["shape"].dtype == np.int64 and inputs["shape"].tolist() == list(x_shape)
        dim = x_shape[case.params["axis"]]
        assert inputs["indices"].min() >= -dim and inputs["indices"].max() < dim, case.id
        assert input_problems(case.spec, inputs, case.attributes) == []


def test_valid_cases_draw_negative_indices_and_the_case_dtype_binds_dy(catalog):
    spec = catalog.by_op("GatherGrad")
    assert spec.main_type == "T" and spec.inputs[0].type == "I"
    case = next(c for c in cases(catalog, "GatherGrad", "embedding") if c.dtype == "float16")
    inputs, _ = make_tensors(case)
    assert inputs["dY"].dtype == np.float16 and inputs["shape"].dtype == np.int64
    assert (inputs["indices"] < 0).any() and (inputs["indices"] >= 0).any()


def test_a_bound_reads_its_axis_from_an_attribute_or_param():
    assert generators.resolve_bound("X:axis", {"X": (4, 7)}, {"axis": -1}) == 7
    assert generators.resolve_bound("X:0", {"X": (4, 7)}, {}) == 4
    with pytest.raises(generators.BoundError, match="'dim' is neither an int attribute nor a case param"):
        generators.resolve_bound("X:dim", {"X": (4, 7)}, {})


def test_shape_of_mistakes_are_one_line_errors(catalog):
    data = catalog.by_op("GatherGrad").model_dump(exclude_unset=True)
    wrong = copy.deepcopy(data)
    wrong["cases"]["inputs"]["shape"] = {"kind": "shape_of", "of": "W"}
    assert [f for f, _ in spec_checks.check(Spec.model_validate(wrong))] == ["cases.inputs.shape.of"]
    # only a shape_of input may be a forward_input that the forward op does not take
    wrong = copy.deepcopy(data)
    wrong["cases"]["inputs"]["shape"] = {"kind": "indices", "range": [1, 5]}
    assert any(f == "inputs[0].forward_name" for f, _ in spec_checks.check(Spec.model_validate(wrong)))
    # the input's own shape must hold one value per dim of the input it describes
    wrong = copy.deepcopy(data)
    wrong["inputs"][0]["shape"] = [3]
    wrong["cases"]["shapes"] = None
    wrong["forward"]["shapes"] = {"X": {"shape": [6, 4]}}
    wrong["inputs"][1]["shape"] = [5]
    wrong["inputs"][2]["shape"] = [5, 4]
    case = expand(Spec.model_validate(wrong), "smoke")[0]
    with pytest.raises(CaseError, match=r"input 'shape' \(shape_of\): X has rank 2, so the tensor needs 2 element"):
        make_tensors(case)


def test_an_empty_axis_with_no_indices_is_a_valid_case(catalog):
    case = next(c for c in cases(catalog, "GatherGrad", "empty") if c.params["data"] == [0, 3])
    inputs, _ = make_tensors(case)
    assert inputs["indices"].size == 0 and input_problems(case.spec, inputs, case.attributes) == []


def test_a_training_graph_cannot_take_a_planted_shape(catalog):
    """ORT's builder feeds GatherGrad Shape(X): a group that sets the shape values has no training graph."""
    case = cases(catalog, "GatherGrad", "shape_disagrees_with_dy")[0]
    inputs, forward_inputs = make_tensors(case)
    assert input_problems(case.spec, inputs, case.attributes)
    _, _, missing = forward_call_parts(case, inputs, forward_inputs)
    assert "sets shape directly" in missing
    valid = cases(catalog, "GatherGrad", "basic")[0]
    assert forward_call_parts(valid, *make_tensors(valid))[2] == ""


def test_the_gradient_check_catches_lost_duplicates(catalog):
    case = next(c for c in cases(catalog, "GatherGrad", "duplicates") if c.dtype == "float64")
    inputs, forward_inputs = make_tensors(case)
    assert gradient_check(case, inputs, forward_inputs).passed
    wrong = gradient_check(case, inputs, forward_inputs, reference="test_gather_grad_spec:gather_grad_overwriting_duplicates")
    assert not wrong.passed
    # and the wrong one agrees where no index repeats: the check is what tells them apart
    idx = np.arange(4)
    dy = np.ones((4, 2))
    np.testing.assert_array_equal(gather_grad_overwriting_duplicates([5, 2], idx, dy), gather_grad([5, 2], idx, dy))


def test_an_exported_case_reads_back_in_dys_dtype_not_the_shape_inputs(catalog, tmp_path):
    """run-onnx takes the case dtype from the main type's input (dY), not the first input (the int64 shape)."""
    from harness.run import onnx_data

    case = next(c for c in cases(catalog, "GatherGrad", "basic") if c.dtype == "float64")
    assert onnx_data.export_cases(catalog, [case], tmp_path) == 1
    (directory,) = tmp_path.iterdir()
    model, node = onnx_data.load_model(directory)
    request, expected = onnx_data.request_from_dataset(catalog, model, node, directory / "test_data_set_0", 1)
    assert request.dtype == "float64" and expected["dX"].dtype == np.float64


def test_orts_kernel_of_other_types_is_a_missing_kernel_not_a_rejection():
    """An int32 shape with float16 dY: ORT says 'Failed to find kernel' (its int64-only GatherGrad), not 'Could not
    find an implementation' as with float32; both are a capability gap."""
    from harness.backends.base import Rejected, Unsupported
    from harness.backends.ort import classify_error

    message = ("Failed to find kernel for com.microsoft.GatherGrad(1) (node:'' ep:'CPUExecutionProvider'). ... This op "
               "has been implemented only for the following types (tensor(int64),), but the node in the model has the "
               "following type (tensor(int32))")
    assert isinstance(classify_error("session", "NotImplemented", message), Unsupported)
    assert isinstance(classify_error("run", "InvalidArgument", "indices element out of data bounds"), Rejected)
