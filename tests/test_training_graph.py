"""The training graph as users build it (issue 34): training_graph specs, forward graphs written as exporters write
them (`export`), the forward op's own random draws, and the derivative as the judge where a kernel's contract
is not it (`derivative_differs`). Each rule that turns an outcome into a status is loosened here on purpose."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import pytest

from harness.backends.base import Backend, Outputs, Support, Unsupported
from harness.backends.ort_autograd import OrtAutogradBackend, build
from harness.core.cases import expand
from harness.core.spec_loader import load_catalog
from harness.run.catalog import RunCatalog
from harness.run.engine import judge, prepare, request_for
from harness.run.probe import capability
from harness.spec.errors import SpecError
from tests.conftest import SPECS, copy_specs, edit

OPS = ["MulGradient", "LayerNormalizationGrad", "DropoutGrad", "LeakyReluGrad"]


@pytest.fixture(scope="module")
def specs():
    return RunCatalog.of(load_catalog(SPECS, ops=OPS))


@pytest.fixture(scope="module")
def autograd():
    backend = OrtAutogradBackend()
    if reason := backend.availability():
        pytest.fail(f"ort-autograd unavailable: {reason}")
    yield backend
    backend.close()


def prepared(catalog, op, case_id, dtype="float32", tier="nightly"):
    for c in expand(catalog.by_op(op), tier):
        if c.id == case_id and c.dtype == dtype:
            return prepare(c)
    raise LookupError(f"{op} has no case {dtype}-{case_id}")


def without_divergence(tmp_path, spec_file: str, divergence: str):
    """A copy of the specs with one declared divergence removed."""
    root = copy_specs(tmp_path / "specs")
    path = root / spec_file
    text = path.read_text()
    start = text.index(f"  - id: {divergence}")
    end = text.find("  - id:", start + 10)
    end = end if end > 0 else text.index("\n\n", start) + 1
    path.write_text(text[:start] + text[end:])
    return root


def judged(catalog, p, backend):
    return judge(p, backend, catalog.tolerance(p.case.spec, p.case.dtype), diagnose_failures=False)


@dataclass
class Returns(Backend):
    """Returns fixed outputs (and draws): what the judge makes of them is under test."""
    values: tuple = ()
    drawn: dict | None = None
    differentiates: bool = False

    def __post_init__(self):
        self.name = "fixed"
        self.SUBJECTS = ("kernel", "training_graph")
        self.DIFFERENTIATES_FORWARD = self.differentiates

    def probe(self, request):
        return Support("supported", "assumed")

    def run(self, request):
        return Outputs(list(self.values), draws=self.drawn or {})


# ---- training_graph specs -----------------------------------------------------------------------------------------

class Refuses(Backend):
    def __post_init__(self):
        self.name = "kernels-only"

    def probe(self, request):
        raise AssertionError("a training_graph spec must be decided before any probe runs")


def test_a_training_graph_spec_is_not_registered_on_kernel_backends_without_running(specs):
    support = capability(Refuses(), specs.by_op("MulGradient"), "float32")
    assert support.status == "not_registered" and "training_graph" in support.reason


def test_a_training_graph_spec_runs_on_ort_autograd_and_names_the_builders_nodes(specs, autograd):
    result = judged(specs, prepared(specs, "MulGradient", "broadcast/shapes=2x3x4,4"), autograd)
    assert result.status == "pass", result.detail
    assert any(n.startswith("ReduceSum") for n in result.nodes)  # dB summed back over the broadcast axes


@pytest.mark.parametrize("old, new, message", [
    ("op: MulGradient", "op: MulGrad", "name a training_graph spec after its forward op: MulGradient"),
    ("forward: {op: Mul, opset: 14,", "forward: {op: Mul, opset: 14, domain: com.microsoft,",
     "a training_graph spec lives in its forward op's domain"),
    ("role: forward_input, description: Mul's second input.", "role: saved_activation, description: Mul's second input.",
     "takes the forward op's inputs and the incoming gradients only"),
    ("export: {dynamic_axes: all}", "export: {dynamic_axes: {Z: {0: batch}}}",
     "unknown forward input 'Z'"),
    ("export: {dynamic_axes: all}", "export: {outputs: required}", "Mul has no forward.optional_outputs"),
    ("export: {dynamic_axes: all}", "export: {constants: [B]}", "dB: the gradient of a constant"),
])
def test_training_graph_fields_are_checked(tmp_path, old, new, message):
    root = copy_specs(tmp_path / "specs")
    edit(root / "ai.onnx" / "MulGradient.yaml", old, new)
    with pytest.raises(SpecError) as error:
        load_catalog(root, ops=["MulGradient"])
    assert message in str(error.value)


# ---- export: the forward graph as exporters write it --------------------------------------------------------------

def test_dynamic_axes_are_declared_as_the_exporter_names_them(specs):
    graph = build(request_for(prepared(specs, "LayerNormalizationGrad", "exported/shape=2x3x8")))
    model = onnx.load_from_string(graph.model)
    x = next(i for i in model.graph.input if i.name == "X")
    dims = [d.dim_param or d.dim_value for d in x.type.tensor_type.shape.dim]
    assert dims == ["batch", "sequence", 8]
    # the incoming gradient is then declared by rank only
    assert graph.starts["Y"][1] == [None, None, None]


def test_dynamic_axes_all_names_every_axis(specs):
    graph = build(request_for(prepared(specs, "MulGradient", "dynamic_axes/shapes=2x1x4,1x3x1")))
    model = onnx.load_from_string(graph.model)
    named = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    assert named == {"A": ["A_0", "A_1", "A_2"], "B": ["B_0", "B_1", "B_2"]}


def test_constants_are_initializers_and_get_no_gradient(specs):
    graph = build(request_for(prepared(specs, "LayerNormalizationGrad", "frozen_weights/shape=2x3x8;outputs=X_grad")))
    model = onnx.load_from_string(graph.model)
    assert sorted(i.name for i in model.graph.initializer) == ["B", "scale"]
    assert [i.name for i in model.graph.input] == ["X"] and set(graph.feeds) == {"X", "Y_grad"}
    assert graph.wrt == ["X"]


def test_required_outputs_leave_the_optional_outputs_off_the_node(specs):
    graph = build(request_for(prepared(specs, "LayerNormalizationGrad", "required_outputs/shape=2x3x8")))
    node = onnx.load_from_string(graph.model).graph.node[0]
    assert list(node.output) == ["Y"]
    full = build(request_for(prepared(specs, "LayerNormalizationGrad", "dynamic_axes/shape=2x3x8;axis=-1")))
    assert list(onnx.load_from_string(full.model).graph.node[0].output) == ["Y", "mean", "inv_std_var"]


def test_a_builder_that_refuses_a_valid_exported_model_fails_unless_declared(tmp_path, autograd):
    """LayerNormalization written with Y only, as transformers export it: the builder refuses it. Without the
    spec's declared divergence that is a failure (a user's model cannot be trained), never `unsupported`."""
    root = without_divergence(tmp_path, "com.microsoft/LayerNormalizationGrad.yaml", "ort-autograd-layernorm-required-outputs-refused")
    catalog = RunCatalog.of(load_catalog(root, ops=["LayerNormalizationGrad"]))
    result = judged(catalog, prepared(catalog, "LayerNormalizationGrad", "required_outputs/shape=2x3x8"), autograd)
    assert (result.status, result.failure) == ("fail", "rejects_valid"), result.detail
    assert "OutputDefs().size()" in result.detail and "onnxruntime_src" not in result.detail


# ---- the forward op's own random draws ----------------------------------------------------------------------------

def test_a_random_forward_op_is_built_with_a_seed_and_its_draw_fetched(specs):
    p = prepared(specs, "DropoutGrad", "ratio_tenth/shape=4x16", tier="ci")
    graph = build(request_for(p))
    model = onnx.load_from_string(graph.model)
    node = model.graph.node[0]
    assert list(node.input) == ["data", "ratio", "training_mode"]  # the case's mask is not given to Dropout
    assert list(node.output) == ["output", "mask"]
    assert [a.i for a in node.attribute if a.name == "seed"] == [p.seed % 2**31]
    assert graph.draws == ["mask"] and "mask" in [o.name for o in model.graph.output]


def test_the_expected_gradient_is_computed_with_the_backends_draw(specs):
    p = prepared(specs, "DropoutGrad", "ratio_tenth/shape=4x16", tier="ci")
    dy, mask = p.inputs["dy"].astype(np.float64), p.inputs["mask"]
    ratio = float(np.asarray(p.inputs["ratio"]).reshape(()))
    other = ~mask  # a draw unlike the case's
    with_other = (dy * other / (1 - ratio)).astype(np.float32)
    with_case = (dy * mask / (1 - ratio)).astype(np.float32)
    assert judged(specs, p, Returns(values=(with_other,), drawn={"mask": other})).status == "pass"
    # judged against the case's own mask instead, the same outputs would fail: the draw is what decides
    assert judged(specs, p, Returns(values=(with_other,), drawn={})).status == "fail"
    assert judged(specs, p, Returns(values=(with_case,), drawn={"mask": other})).status == "fail"


def test_dropout_runs_through_the_training_graph(specs, autograd):
    p = prepared(specs, "DropoutGrad", "ratio_tenth/shape=4x16", tier="ci")
    prepared_seed = p.seed % 2**31  # the builder copies Dropout's seed onto DropoutGrad
    result = judged(specs, p, autograd)
    assert result.status == "pass", result.detail
    assert result.nodes == [f"com.microsoft.DropoutGrad(seed={prepared_seed})"]


# ---- judged by the derivative where the contract is not it --------------------------------------------------------

def test_derivative_differs_judges_a_training_graph_by_the_derivative(specs):
    p = prepared(specs, "LeakyReluGrad", "negative_alpha/shape=5x8;alpha=-0.5", tier="ci")
    dy, x = p.inputs["dY"].astype(np.float64), p.forward_inputs["X"]
    contract = np.where(x * np.where(x > 0, 1, -0.5) > 0, dy, -0.5 * dy).astype(np.float32)  # selected on Y
    derivative = np.where(x > 0, dy, -0.5 * dy).astype(np.float32)  # selected on X
    assert (contract != derivative).any()
    graph = dict(values=(), differentiates=True)
    assert judged(specs, p, Returns(**{**graph, "values": (derivative,)})).status == "pass"
    assert judged(specs, p, Returns(**{**graph, "values": (contract,)})).status == "fail"
    # a kernel backend is judged by the op's contract in the same group
    assert judged(specs, p, Returns(values=(contract,))).status == "pass"
    assert judged(specs, p, Returns(values=(derivative,))).status == "fail"


def test_orts_training_graph_for_negative_alpha_is_not_the_derivative(tmp_path, autograd):
    root = without_divergence(tmp_path, "com.microsoft/LeakyReluGrad.yaml", "ort-autograd-leakyrelu-negative-alpha-not-derivative")
    catalog = RunCatalog.of(load_catalog(root, ops=["LeakyReluGrad"]))
    result = judged(catalog, prepared(catalog, "LeakyReluGrad", "negative_alpha/shape=5x8;alpha=-0.5", tier="ci"), autograd)
    assert (result.status, result.failure) == ("fail", "wrong_values"), result.detail


# ---- the kernel specs take the nodes the builder writes -----------------------------------------------------------

def _node_attributes(node: str) -> tuple[str, set[str]]:
    """('LayerNormalizationGrad', {'axis', 'epsilon'}) from 'com.microsoft.LayerNormalizationGrad(axis=-1, epsilon=...)'."""
    head, _, args = node.partition("(")
    return head.rsplit(".", 1)[-1], {part.split("=", 1)[0] for part in args.rstrip(")").split(", ") if "=" in part}


def test_every_attribute_the_builder_writes_on_a_kernel_node_is_in_its_spec(autograd):
    """A training graph's own gradient nodes can be replayed on reference, openmp and ort only if each kernel spec
    declares what the builder copies onto its node (MaxPoolGrad gets MaxPool's kernel_shape...): one smoke case
    of every kernel spec with a forward op, run through ort-autograd, names them."""
    catalog = RunCatalog.of(load_catalog(SPECS))
    kernels = {s.op: s for s in catalog.specs if s.subject == "kernel"}
    checked, missing = set(), []
    for spec in kernels.values():
        if spec.forward is None:
            continue
        case = next(c for c in expand(spec, "smoke") if c.valid and c.dtype == "float32")
        result = judged(catalog, prepare(case), autograd)
        for op, names in map(_node_attributes, result.nodes or []):
            if op in kernels:
                checked.add(op)
                missing += [f"{op}.{n}" for n in sorted(names - set(kernels[op].attributes))]
    assert not missing, f"the builder writes attributes the specs do not declare (copied_by_builder): {missing}"
    assert {"MaxPoolGrad", "DropoutGrad", "LayerNormalizationGrad", "ConvGrad"} <= checked


def test_the_generated_suite_gives_a_training_graph_spec_no_items_on_kernel_backends():
    """'without cost': no test item at all for ort, openmp or ort-cuda on a training_graph spec; reference and
    ort-autograd keep theirs, and a kernel spec keeps every backend."""
    import subprocess
    import sys

    from harness import backends as registry
    from tests.conftest import REPO

    assert registry.subjects("ort") == ("kernel",) and "training_graph" in registry.subjects("ort-autograd")
    assert "training_graph" in registry.subjects("some-plugin")  # a plugin runs the ones it declares
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "generated_tests/test_ai_onnx_MulGradient.py", "generated_tests/test_ReluGrad.py"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    ids = [line for line in out.splitlines() if "::" in line]
    mul = [i for i in ids if "MulGradient.py::test_MulGradient[" in i]
    assert mul and all(i.endswith(("-reference]", "-ort-autograd]")) for i in mul), mul[:5]
    assert any(i.endswith("-ort]") for i in ids if "ReluGrad.py::test_ReluGrad[" in i)


@dataclass
class RejectsFull(Backend):
    """Answers a request for the case's own outputs; rejects (or answers) a request for every output."""
    answer: tuple = ()
    reject_subset: bool = False

    def __post_init__(self):
        self.name = "rejects-full"

    def run(self, request):
        from harness.backends.base import Rejected

        if all(request.outputs) or self.reject_subset:
            return Rejected("the gradient builder refuses the other inputs' gradients")
        return Outputs([a if wanted else None for a, wanted in zip(self.answer, request.outputs)])


def test_an_output_subset_check_whose_full_run_is_refused_is_not_a_pass_nor_a_failure(specs):
    """A builder that refuses the gradient of the other inputs (Pow's exponent) is judged by the cases that ask
    for it; the subset check then says it could not check (unsupported), never pass. A refused subset fails."""
    from harness.run.self_consistency import output_subset

    p = prepared(specs, "LayerNormalizationGrad", "frozen_weights/shape=2x3x8;outputs=X_grad")
    answer = tuple(v.astype(np.float32) for v in p.expected)
    result = output_subset(p, RejectsFull(answer=answer))
    assert result.status == "unsupported" and "full run was rejected" in result.detail
    refused = output_subset(p, RejectsFull(answer=answer, reject_subset=True))
    assert (refused.status, refused.failure) == ("fail", "rejects_valid")


def test_a_mismatched_forward_input_reaches_the_builder_only_in_a_training_graph_spec():
    """Gemm with B [6, 5] against A [3, 4] is a forward model the training graph must refuse: it is built. GeluGrad's
    X [3] against dY [4] is a mismatch between the gradient op's inputs that no training graph can hold: unsupported."""
    catalog = RunCatalog.of(load_catalog(SPECS, ops=["GemmGradient", "GeluGrad"]))
    gemm = build(request_for(prepared(catalog, "GemmGradient", "inner_mismatch/mkn=3x4x5", tier="ci")))
    assert not isinstance(gemm, Unsupported)
    b = next(i for i in onnx.load_from_string(gemm.model).graph.input if i.name == "B")
    assert [d.dim_value for d in b.type.tensor_type.shape.dim] == [6, 5]
    gelu = build(request_for(prepared(catalog, "GeluGrad", "shape_mismatch/shape=4", tier="ci")))
    assert isinstance(gelu, Unsupported) and "gives X a shape of its own" in gelu.reason
