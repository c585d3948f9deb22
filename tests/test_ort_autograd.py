"""`ort-autograd`: the spec's forward op differentiated by onnxruntime-training's gradient builder, run on
CPU in the isolated worker and judged like every backend; the gradient nodes it inserted are recorded."""
import onnx
import pytest

from harness.backends.base import Rejected, Unsupported
from harness.backends.ort_autograd import OrtAutogradBackend, build, classify_build_error
from harness.core.cases import expand
from harness.core.spec_loader import load_catalog
from harness.run.engine import apply_divergences, judge, new_result, prepare, request_for
from tests.conftest import edit


@pytest.fixture(scope="module")
def backend():
    b = OrtAutogradBackend()
    if reason := b.availability():
        pytest.fail(f"ort-autograd unavailable: {reason}")
    yield b
    b.close()


def case(catalog_or_spec, op_or_none, case_id, dtype="float32", tier="nightly"):
    spec = catalog_or_spec.by_op(op_or_none) if op_or_none else catalog_or_spec
    for c in expand(spec, tier):
        if c.id == case_id and c.dtype == dtype:
            return prepare(c)
    raise LookupError(f"{spec.op} has no case {dtype}-{case_id}")


def test_the_forward_model_is_the_spec_forward_op_at_its_opset(catalog):
    graph = build(request_for(case(catalog, "SoftmaxGrad", "rank3/shape=2x3x5;axis=1", tier="ci")))
    model = onnx.load_from_string(graph.model)
    forward = model.graph.node[0]
    assert (forward.op_type, forward.domain, list(forward.input)) == ("Softmax", "", ["X"])
    assert [(a.name, a.i) for a in forward.attribute] == [("axis", 1)]
    assert {o.domain: o.version for o in model.opset_import}[""] == 11
    # the incoming gradient is fed as the builder's own name for dL/dY: no loss nodes reach the graph under test
    assert graph.wrt == ["X"] and graph.fetches == ["X_grad"] and set(graph.feeds) == {"X", "Y_grad"}


def test_a_case_runs_and_names_the_gradient_node_the_builder_inserted(catalog, backend):
    prepared = case(catalog, "SoftmaxGrad_13", "rank3/shape=2x3x5;axis=1", tier="ci")
    result = judge(prepared, backend, catalog.tolerance(prepared.case.spec, "float32"))
    assert result.status == "pass", result.detail
    assert result.nodes == ["com.microsoft.SoftmaxGrad_13(axis=1)"]


def test_a_wrong_forward_opset_is_caught(spec_copy, backend):
    """Softmax-13 normalises one axis, Softmax-11 the coerced 2-D rows: the same SoftmaxGrad case judged
    against the legacy reference must fail when the training graph is built at the wrong opset."""
    edit(spec_copy / "com.microsoft" / "SoftmaxGrad.yaml", "op: Softmax, opset: 11,", "op: Softmax, opset: 13,")
    catalog = load_catalog(spec_copy)
    prepared = case(catalog, "SoftmaxGrad", "rank3/shape=2x3x5;axis=1", tier="ci")
    result = judge(prepared, backend, catalog.tolerance(prepared.case.spec, "float32"))
    assert result.status == "fail" and result.failure == "wrong_values", result.detail


def test_values_planted_in_a_forward_output_have_no_forward_inputs(catalog):
    request = request_for(case(catalog, "SigmoidGrad", "special_values/shape=36", tier="ci"))
    outcome = build(request)
    assert isinstance(outcome, Unsupported) and "sets Y directly" in outcome.reason


def test_the_gradient_of_an_omitted_input_is_unsupported(catalog):
    prepared = case(catalog, "GRUGrad", "optional_inputs/seq=3;batch=2;input_size=4;hidden_size=5;omit=B;linear_before_reset=0",
                    tier="ci")
    outcome = build(request_for(prepared))
    assert isinstance(outcome, Unsupported) and "omits" in outcome.reason


def test_a_spec_without_forward_op_is_unsupported(catalog):
    prepared = case(catalog, "GRUTraining", "basic/seq=1;batch=1;input_size=2;hidden_size=3;linear_before_reset=0",
                    tier="ci")
    outcome = build(request_for(prepared))
    assert isinstance(outcome, Unsupported) and "no forward op" in outcome.reason


def test_a_forward_op_without_gradient_is_unsupported_with_orts_message(spec_copy, backend):
    edit(spec_copy / "com.microsoft" / "ReluGrad.yaml", "forward: {op: Relu,", "forward: {op: Sum,")
    catalog = load_catalog(spec_copy)
    outcome = backend.run(request_for(case(catalog, "ReluGrad", "basic/shape=7", tier="ci")))
    assert isinstance(outcome, Unsupported), outcome
    assert "The gradient builder has not been registered: Sum" in outcome.reason


@pytest.mark.parametrize("message, kind", [
    ("/onnxruntime_src/x/gradient_builder_registry.cc:29 GradientDef f(a, b) gradient_builder != nullptr was false. "
     "The gradient builder has not been registered: Sum for node", Unsupported),
    ("Fatal error: com.microsoft:BiasFastGelu(-1) is not a registered function/op", Unsupported),
    ("[ShapeInferenceError] 'axis' must be in [-2 , 1]. Its actual value is: 2", Rejected),
    ("Type Error: Type (tensor(double)) of input parameter (X) of operator (Gelu) in node (forward) is invalid.", Unsupported),
    # a type clash in a node the builder wrote (float32 zeros for a float64 ScatterElements' gradient) is its defect
    ("Type Error: Type parameter (T) of Optype (ScatterElements) bound to different types (tensor(double) and "
     "tensor(float) in node (forward_Grad/ScatterElements_2).", Rejected),
])
def test_builder_errors_are_capability_gaps_or_rejections(message, kind):
    outcome = classify_build_error(message)
    assert isinstance(outcome, kind)
    assert "onnxruntime_src" not in str(outcome)  # the C++ signature is cut, the message kept


def test_only_its_own_divergences_must_reproduce(catalog):
    """The inherited `ort` divergences describe kernels ort-autograd reaches through its own graphs: one
    that does not show on a passing case is no evidence against the spec. Its own must reproduce."""
    prepared = case(catalog, "GeluGrad", "infinities/shape=2", tier="ci")
    inherited = new_result(prepared, "ort-autograd")
    apply_divergences(prepared, inherited, "ort", inherited_must_reproduce=False)
    assert inherited.divergence is None and inherited.status == "pass"
    own = new_result(prepared, "ort")
    apply_divergences(prepared, own)
    assert own.divergence == "ort-gelugrad-inf" and own.divergence_reproduced is False
