"""The format's features for the training op set: forward-only attributes and inputs, forward output shapes
from the forward reference, scalar inputs, bool and integer inputs with their own generators, and the
generated field reference page."""
import copy

import numpy as np
import pytest
from pydantic import ValidationError

from harness.backends import onnx_model
from harness.backends.base import Request
from harness.codegen import gen_docs
from harness.core import generators, spec_checks
from harness.core.cases import expand
from harness.core.gradcheck import gradient_check
from harness.core.shapes import CaseError, input_shapes
from harness.core.tensors import make_tensors
from harness.spec.model import IndicesGenerator, LabelsGenerator, MaskGenerator, Spec

ROW = {
    "schema_version": 1, "op": "RowCenterGrad", "summary": "A fixture: gradient of row centering.",
    "formula": "dX = alpha * (dY - mean(dY))",
    "forward": {"op": "RowCenter", "reference": "format_hooks:row_center", "inputs": ["X", "alpha", "B"],
                "outputs": ["Y", "mean"], "own_attributes": {"epsilon": {"type": "float", "default": 0.0, "min": 0}},
                "shapes": {"B": {"shape_fn": "format_hooks:last_axis"}}},
    "type_constraints": {"T": {"types": ["float32", "float64"]}},
    "inputs": [{"name": "dY", "type": "T", "role": "grad_output", "grad_of": "Y"},
               {"name": "X", "type": "T", "role": "forward_input", "shape_from": "dY"},
               {"name": "alpha", "type": "T", "role": "forward_input", "shape": []},
               {"name": "mean", "type": "T", "role": "saved_activation"}],
    "outputs": [{"name": "dX", "type": "T", "shape_from": "X", "grad_of": "X"}],
    "reference": "format_hooks:row_center_grad",
    "cases": {"dtypes": ["float64"], "groups": [
        {"name": "basic", "params": {"shape": [[3, 5]], "epsilon": [0.0, 0.5]}}]},
}
PACKAGES = ("reference", "format_hooks")


def spec_of(data) -> Spec:
    return Spec.model_validate(data)


def problems(data) -> list[tuple[str, str]]:
    return spec_checks.check(spec_of(data), PACKAGES)


def test_the_fixture_validates_and_its_reference_is_the_gradient():
    assert problems(ROW) == []
    for case in expand(spec_of(ROW)):
        inputs, forward_inputs = make_tensors(case)
        assert gradient_check(case, inputs, forward_inputs).passed, case.id


def test_a_saved_output_without_a_rule_has_the_forward_outputs_shape_and_a_scalar_its_declared_shape():
    case = expand(spec_of(ROW))[0]
    shapes = input_shapes(case)
    assert shapes["mean"] == (3, 1) and shapes["alpha"] == ()
    inputs, forward_inputs = make_tensors(case)
    assert inputs["mean"].shape == (3, 1) and inputs["alpha"].shape == ()
    assert forward_inputs["B"].shape == (5,)  # from its forward.shapes rule, not the `shape` param [3, 5]


def test_forward_only_attributes_reach_the_forward_reference_but_not_the_node():
    with_eps = next(c for c in expand(spec_of(ROW)) if c.params["epsilon"] == 0.5)
    inputs, _ = make_tensors(with_eps)
    np.testing.assert_allclose(inputs["mean"], inputs["X"].mean(axis=-1, keepdims=True) + 0.5)
    assert "epsilon" not in with_eps.attributes


def test_forward_only_attribute_mistakes_are_one_line_validate_errors():
    data = copy.deepcopy(ROW)
    data["cases"]["groups"][0]["params"]["epsilon"] = [-1.0]
    assert [f for f, _ in problems(data)] == ["cases.groups[0].params.epsilon"]
    data = copy.deepcopy(ROW)
    data["attributes"] = {"epsilon": {"type": "float", "default": 0.0}}
    assert any(f == "forward.own_attributes.epsilon" for f, _ in problems(data))


def test_a_forward_only_input_without_a_shape_rule_is_a_validate_error():
    data = copy.deepcopy(ROW)
    del data["forward"]["shapes"]
    [(field, message)] = problems(data)
    assert field == "forward.shapes" and "'B'" in message
    data["forward"]["shapes"] = {"B": {"shape_from": "nope"}}
    assert [f for f, _ in problems(data)] == ["forward.shapes.B.shape_from"]


MASKED = {
    "schema_version": 1, "op": "MaskedGrad", "summary": "A fixture: a masked pass-through with an index.",
    "formula": "dX = dY * mask",
    "forward": {"op": "Masked", "reference": "format_hooks:masked", "inputs": ["X", "mask", "index", "ratio"],
                "outputs": ["Y", "index_out"], "shapes": {"X": {"shape_from": "dY"}}},
    "type_constraints": {"T": {"types": ["float32"]}, "TMask": {"types": ["bool"]}, "TInd": {"types": ["int64"]}},
    "inputs": [{"name": "dY", "type": "T", "role": "grad_output", "grad_of": "Y"},
               {"name": "mask", "type": "TMask", "role": "forward_input", "shape_from": "dY"},
               {"name": "index", "type": "TInd", "role": "forward_input", "shape": [400]},
               {"name": "ratio", "type": "T", "role": "forward_input", "shape": [],
                "values": {"min": 0, "max": 1, "max_exclusive": True}}],
    "outputs": [{"name": "dX", "type": "T", "shape_from": "dY", "grad_of": "X"}],
    "reference": "format_hooks:masked_grad",
    "cases": {"dtypes": ["float32"],
              "inputs": {"mask": {"kind": "mask", "keep": 0.75},
                         "index": {"kind": "indices", "dim": "dY:0", "negative": True, "out_of_range": 0.25},
                         "ratio": {"values": [0.5]}},
              "groups": [{"name": "basic", "vjp": "the mask is not differentiable", "params": {"shape": [[40, 50]]}}],
              "invalid": [{"name": "ratio_one", "why": "ratio must lie in [0, 1)", "params": {"shape": [[4, 5]]},
                           "inputs": {"ratio": {"values": [1.0]}}}]},
}


def test_bool_and_integer_inputs_are_drawn_by_their_generators_in_their_dtypes():
    assert problems(MASKED) == []
    inputs, _ = make_tensors(expand(spec_of(MASKED))[0])
    mask, index = inputs["mask"], inputs["index"]
    assert mask.dtype == np.bool_ and abs(mask.mean() - 0.75) < 0.05
    assert index.dtype == np.int64
    inside = (index >= -40) & (index < 40)
    assert abs((~inside).mean() - 0.25) < 0.07 and (index[inside] < 0).any() and (index[inside] >= 0).any()


def test_an_integer_input_with_a_float_distribution_is_refused():
    data = copy.deepcopy(MASKED)
    data["cases"]["inputs"]["index"] = {"distribution": "uniform", "low": 0, "high": 3}
    with pytest.raises(CaseError, match="index.*int64.*kind mask, labels or indices"):
        make_tensors(expand(spec_of(data))[0])


def test_a_bad_generator_kind_is_a_schema_error():
    data = copy.deepcopy(MASKED)
    data["cases"]["inputs"]["mask"] = {"kind": "masks"}
    with pytest.raises(ValidationError):
        spec_of(data)


def test_labels_stay_in_their_classes_except_the_ignored_ones():
    rng = np.random.default_rng(0)
    gen = LabelsGenerator(kind="labels", classes="scores:1", ignore_index=-100, ignore_fraction=0.2)
    labels = generators.draw_labels(gen, (1000,), rng, {"scores": (1000, 7)}, {})
    ignored = labels == -100
    assert 0.15 < ignored.mean() < 0.25 and set(np.unique(labels[~ignored])) == set(range(7))
    by_param = LabelsGenerator(kind="labels", classes="num_classes")
    assert generators.draw_labels(by_param, (50,), rng, {}, {"num_classes": 3}).max() <= 2
    with pytest.raises(generators.BoundError, match="neither a case param"):
        generators.draw_labels(by_param, (5,), rng, {}, {})


def test_indices_in_a_range_and_masks_at_the_extremes():
    rng = np.random.default_rng(0)
    values = generators.draw_indices(IndicesGenerator(kind="indices", range=(2, 5)), (500,), rng, {}, {})
    assert set(np.unique(values)) == {2, 3, 4}
    assert not generators.draw_mask(MaskGenerator(kind="mask", keep=0.0), (100,), rng).any()
    assert generators.draw_mask(MaskGenerator(kind="mask", keep=1.0), (100,), rng).all()


def test_a_bool_and_an_int64_input_reach_the_one_node_model_in_their_dtypes():
    spec = spec_of(MASKED)
    case = expand(spec)[0]
    inputs, _ = make_tensors(case)
    built = onnx_model.build(Request(spec, case.dtype, [inputs[i.name] for i in spec.inputs], {}, (True,)))
    import onnx
    graph = onnx.load_from_string(built.model).graph
    types = {i.name: i.type.tensor_type.elem_type for i in graph.input}
    assert types["mask"] == onnx.TensorProto.BOOL and types["index"] == onnx.TensorProto.INT64
    assert built.feeds["mask"].dtype == np.bool_ and built.feeds["index"].dtype == np.int64


def test_the_spec_field_page_is_fresh_and_every_field_is_described():
    assert not gen_docs.stale(), "docs/spec-fields.md is stale: run `opconform gen-docs`"
    for section in gen_docs._models():
        for name, field in section.model_fields.items():
            assert field.description or field.examples, f"{section.__name__}.{name} has no description"
    page = gen_docs.render()
    for name in ("own_attributes", "shape_from", "ignore_index", "out_of_range", "`omit`", "`outputs`"):
        assert name in page


def test_values_outside_a_declared_range_make_an_invalid_case_every_backend_must_reject():
    from harness.backends.base import Rejected
    from harness.backends.reference import ReferenceBackend
    from harness.run.engine import prepare, request_for

    spec = spec_of(MASKED)
    invalid = next(c for c in expand(spec) if not c.valid)
    prepared = prepare(invalid)
    assert prepared.problem is None  # the forward reference raising on ratio 1 is not a harness error
    outcome = ReferenceBackend().run(request_for(prepared))
    assert isinstance(outcome, Rejected) and "ratio holds 1, outside [0, 1)" in outcome.message


def test_a_valid_group_drawing_values_outside_the_contract_is_a_validate_error():
    data = copy.deepcopy(MASKED)
    data["cases"]["inputs"]["ratio"] = {"values": [1.0]}
    [(field, message)] = problems(data)
    assert field == "cases.groups[0]" and "outside [0, 1)" in message
    data = copy.deepcopy(MASKED)
    data["valid_values"] = "format_hooks:index_not_all_negative"
    data["cases"]["inputs"]["index"] = {"kind": "indices", "range": [-3, -1]}
    [(field, message)] = problems(data)
    assert field == "cases.groups[0]" and "every index is negative" in message


def test_the_openmp_library_gets_every_spec_dtype_under_its_onnx_code():
    from harness.backends import openmp_lib
    from harness.core import dtypes

    for name, numpy_dtype in dtypes.NUMPY.items():
        assert openmp_lib._DTYPE_CODES[numpy_dtype] == dtypes.ONNX[name], name


def test_a_scalar_mask_is_a_0d_array_and_a_fixed_shape_rule_is_part_of_the_contract():
    from harness.core.contract import input_problems

    mask = generators.draw_mask(MaskGenerator(kind="mask", keep=1.0), (), np.random.default_rng(0))
    assert isinstance(mask, np.ndarray) and mask.shape == () and mask.dtype == np.bool_
    spec = spec_of(MASKED)
    inputs, _ = make_tensors(expand(spec)[0])
    assert input_problems(spec, inputs, {}) == []
    for wrong, said in (([1], "must be a scalar (rank 0)"), ([2], "must be a scalar (rank 0)")):
        bad = {**inputs, "ratio": np.full(wrong, 0.5, np.float32)}
        assert any(f"input ratio has shape {wrong} but {said}" in p for p in input_problems(spec, bad, {}))
    bad = {**inputs, "index": inputs["index"][:399]}
    assert any("input index has shape [399] but must be of shape [400]" in p for p in input_problems(spec, bad, {}))
