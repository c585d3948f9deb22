"""The emission rules of `opconform model --emit-cases`: overlays for a team, the marked block of a spec file for the
built-in specs, which groups go to the ci tier, what replaces what; and the census rules that need no ORT run."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from onnx import TensorProto, helper

from harness.core.spec_loader import load_catalog
from harness.model import emit
from harness.model.build import NEEDS_TORCH, BuildError, build
from harness.model.census import Tensor, census, gradient_side

ROOT = Path(__file__).resolve().parents[2]


def group(name: str, elements: int, tier: str = "ci") -> dict:
    return {"name": name, "description": "d", emit.ELEMENTS: elements, "tier": tier, "dtypes": ["float32"],
            "params": {"config": [{"shape": [elements]}]}}


def test_one_ci_group_per_op_and_model_the_smallest():
    tiers = {g["name"]: g["tier"] for g in emit.tiered([group("m_001", 500), group("m_002", 40), group("m_003", 900)])}
    assert tiers == {"m_001": "nightly", "m_002": "ci", "m_003": "nightly"}
    # a configuration too large for the gate never goes to ci, even alone
    assert emit.tiered([group("m_001", emit.CI_ELEMENTS + 1)])[0]["tier"] == "nightly"
    assert all(emit.ELEMENTS not in g for g in emit.tiered([group("m_001", 1)]))


def test_into_specs_writes_a_marked_block_replacing_the_models_groups(tmp_path):
    root = tmp_path / "specs"
    shutil.copytree(ROOT / "specs" / "com.microsoft", root / "com.microsoft",
                    ignore=lambda d, names: [n for n in names if n != "ReluGrad.yaml"])
    path = root / "com.microsoft" / "ReluGrad.yaml"
    before = yaml.safe_load(path.read_text())["cases"]
    own = [g for g in before["groups"] if not g["name"].startswith(("alpha_", "beta_"))]
    emit.write_into_specs(root, {("com.microsoft", "ReluGrad"): [group("alpha_001", 6), group("alpha_002", 8)]}, "alpha")
    emit.write_into_specs(root, {("com.microsoft", "ReluGrad"): [group("beta_001", 4)]}, "beta")
    emit.write_into_specs(root, {("com.microsoft", "ReluGrad"): [group("alpha_001", 10)]}, "alpha")  # alpha again
    text = path.read_text()
    assert text.count(emit.BLOCK_BEGIN) == 1 and text.count(emit.BLOCK_END) == 1
    after = yaml.safe_load(text)["cases"]
    names = [g["name"] for g in after["groups"]]
    assert names[:len(own)] == [g["name"] for g in own]  # the spec's own groups first, untouched
    assert names[len(own):] == ["beta_001", "alpha_001"]  # alpha's old groups replaced, beta's kept
    assert after["invalid"] == before["invalid"]  # the block ends the groups list, nothing after it moves
    assert next(g for g in after["groups"] if g["name"] == "alpha_001")["params"]["config"] == [{"shape": [10]}]


def test_into_specs_keeps_at_most_two_ci_groups_per_spec(tmp_path):
    root = tmp_path / "specs"
    shutil.copytree(ROOT / "specs" / "com.microsoft", root / "com.microsoft",
                    ignore=lambda d, names: [n for n in names if n != "QuickGeluGrad.yaml"])
    for prefix in ("a", "b", "c"):
        emit.write_into_specs(root, {("com.microsoft", "QuickGeluGrad"): [group(f"{prefix}_001", 4)]}, prefix)
    groups = yaml.safe_load((root / "com.microsoft" / "QuickGeluGrad.yaml").read_text())["cases"]["groups"]
    tiers = {g["name"]: g["tier"] for g in groups if g["name"] in ("a_001", "b_001", "c_001")}
    assert tiers == {"a_001": "ci", "b_001": "ci", "c_001": "nightly"}
    assert emit.SPEC_CI_GROUPS == 2


def test_into_specs_needs_the_spec_file(tmp_path):
    with pytest.raises(emit.EmitError, match="no such spec file"):
        emit.write_into_specs(tmp_path, {("com.microsoft", "ReluGrad"): [group("m_001", 4)]}, "m")


def test_overlay_groups_never_carry_the_size_key(tmp_path):
    emit.write_overlays(tmp_path, {("com.microsoft", "ReluGrad"): [group("m_001", 4)]}, "m")
    body = yaml.safe_load((tmp_path / "com.microsoft" / "ReluGrad.overlay.yaml").read_text())
    assert body["extends"] == "ReluGrad" and emit.ELEMENTS not in body["groups"][0]


def test_a_forward_model_without_torch_is_one_line(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(BuildError) as e:
        build(tmp_path / "m.onnx", tmp_path / "out", "mse", [], 10)
    assert str(e.value) == NEEDS_TORCH and "\n" not in NEEDS_TORCH and "[torch]" in NEEDS_TORCH


def _relu_training_graph():
    """A hand-written training graph: Relu forward, its ReluGrad under the builder's naming, and the builder's Sum of
    two gradients (an op without a spec)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="/act/Relu"),
             helper.make_node("ReduceSum", ["y"], ["loss"], name="/loss", keepdims=0),
             helper.make_node("Identity", ["loss_grad"], ["y_grad"], name="/loss_Grad/Identity_0"),
             helper.make_node("ReluGrad", ["y_grad", "y"], ["x_grad"], name="/act/Relu_Grad/ReluGrad_0",
                              domain="com.microsoft"),
             helper.make_node("Sum", ["x_grad", "x_grad"], ["acc"], name="/x_Grad/Sum_0")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])])
    return helper.make_model(graph)


def test_gradient_side_and_uncovered_rules():
    model = _relu_training_graph()
    assert [n.name for n in gradient_side(model)] == ["/loss_Grad/Identity_0", "/act/Relu_Grad/ReluGrad_0",
                                                       "/x_Grad/Sum_0"]
    f32 = lambda *shape: Tensor("float32", shape, None)  # noqa: E731
    tensors = {"x": f32(4, 3), "y": f32(4, 3), "loss": f32(), "loss_grad": f32(), "y_grad": f32(4, 3),
               "x_grad": f32(4, 3), "acc": f32(4, 3)}
    found = census(model, tensors, load_catalog().specs, {"batch": 4})
    relu = next(c for c in found.configurations if c.spec == "ReluGrad")
    assert relu.node.shapes == {"dY": (4, 3), "X": (4, 3)} and relu.nodes == ["/act/Relu_Grad/ReluGrad_0"]
    # the ReduceSum loss's gradient: ReduceSumGradient's training-graph spec, by the builder's node name
    assert any(c.spec.startswith("ReduceSumGradient") for c in found.configurations)
    assert [(u.op, u.nodes) for u in found.uncovered] == [("Sum", ["/x_Grad/Sum_0"])]


def test_an_unreduced_incoming_gradient_fails_the_configuration():
    model = _relu_training_graph()
    f32 = lambda *shape: Tensor("float32", shape, None)  # noqa: E731
    tensors = {"x": f32(4, 3), "y": f32(1, 3), "loss": f32(), "loss_grad": f32(), "y_grad": f32(4, 3),
               "x_grad": f32(4, 3), "acc": f32(4, 3)}
    relu = next(c for c in census(model, tensors, load_catalog().specs, {}).configurations if c.spec == "ReluGrad")
    assert "of shape [4, 3], but y" in relu.mismatch and "[1, 3]" in relu.mismatch


def _row() -> dict:
    return {"status": "pending", "reason": "", "backends": {}, "divergences": []}


def record(backend: str, status: str, failure=None, divergence=None) -> dict:
    return {"backend": backend, "status": status, "failure": failure, "detail": "", "divergence": divergence}


@pytest.mark.parametrize("records, status", [
    ([record("reference", "pass"), record("ort", "pass")], "verified"),
    ([record("reference", "pass"), record("ort", "unsupported")], "verified"),
    ([record("reference", "pass"), record("ort", "crashed", "crash")], "failed"),
    # a backend's later passing check never hides its failure
    ([record("openmp", "fail", "wrong_values"), record("openmp", "pass")], "failed"),
    ([record("openmp", "pass"), record("openmp", "fail", "wrong_values")], "failed"),
    ([record("ort", "pass"), record("ort", "divergent", divergence="x")], "divergent"),
    ([record("reference", "error")], "failed"),
    ([record("reference", "pass"), record("ort-autograd", "divergent", divergence="some-id")], "divergent"),
    ([record("reference", "pass"), record("ort", "waived")], "waived"),
    ([record("ort", "unsupported")], "not run"),
    ([], "failed"),
])
def test_a_configurations_status_from_its_records(records, status):
    from harness.model.command import judge

    row = _row()
    judge(row, records, None)
    assert row["status"] == status, row


def test_a_failure_names_the_declared_divergences_of_its_backend_and_kind():
    from harness.model.command import judge

    spec = load_catalog().by_op("AddGradient")
    row = _row()
    judge(row, [record("reference", "pass"), record("ort-autograd", "fail", "wrong_shape")], spec)
    ids = {k["id"] for k in row["known"]}
    assert "ort-autograd-add-symbolic-broadcast-unreduced" in ids
    assert all(k["backend"] == "ort-autograd" for k in row["known"])
    assert not any("refused" in k["summary"] for k in row["known"])  # rejects_valid does not explain wrong_shape


def test_the_same_configuration_as_a_declared_group_is_divergent_only_where_declared():
    """A model's configuration identical to a spec's own group takes that group's declared divergences: GRUGrad
    declares gru_001 (the GRU classifier) on ort-autograd with wrong values, nothing else."""
    from harness.model.command import judge

    spec = load_catalog().by_op("GRUGrad")
    failing = {**record("ort-autograd", "fail", "wrong_values"), "dtype": "float32", "case": "model_001/seq=16;batch=2"}
    for same_as, rec, status in [("gru_001", failing, "divergent"),
                                 (None, failing, "failed"),                                    # not identical
                                 ("basic", failing, "failed"),                                 # a group not declared
                                 ("gru_001", {**failing, "backend": "ort"}, "failed"),         # another backend
                                 ("gru_001", {**failing, "failure": "crash", "status": "crashed"}, "failed")]:  # kind
        row = {**_row(), "spec": "GRUGrad", "same_as": same_as}
        judge(row, [record("reference", "pass"), rec], spec)
        assert row["status"] == status, (same_as, rec, row)
    assert row["known"] == [] or all(k["backend"] == "ort-autograd" for k in row["known"])


def test_same_group_finds_the_identical_built_in_group_only():
    from harness.model.command import same_group

    spec = load_catalog().by_op("GRUGrad")
    own = next(g for g in spec.cases.groups if g.name == "gru_001")
    group = {"params": {"config": [dict(own.params["config"][0])]}, "dtypes": ["float32"],
             "export": own.export.model_dump(exclude_defaults=True) if own.export else None}
    assert same_group(spec, group) == "gru_001"
    other = {**group, "params": {"config": [{**own.params["config"][0], "batch": 3}]}}
    assert same_group(spec, other) is None
