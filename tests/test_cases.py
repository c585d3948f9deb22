"""Case expansion, ids, seeds and tensors: stable, deterministic, and what the spec says."""
import numpy as np
from conftest import edit

from harness.core.cases import case_id, expand, group_params
from harness.core.spec_loader import load_catalog
from harness.core.tensors import make_inputs
from harness.run.engine import prepare
from reference.forward.activations import sigmoid


def test_case_ids_read_like_the_params():
    assert case_id("basic", {"shape": [2, 3], "alpha": 0.5}) == "basic/shape=2x3;alpha=0.5"
    assert case_id("scalar", {"shape": []}) == "scalar/shape=scalar"
    assert case_id("plain", {}) == "plain"


def test_params_are_a_product_with_zipped_axes(catalog):
    group = catalog.by_op("QuickGeluGrad").cases.groups[1].model_copy(
        update={"params": {"shape": [[2], [3]], "pair": [{"alpha": 1.0, "x": 1}, {"alpha": 2.0, "x": 2}]}})
    assert group_params(group) == [{"shape": [2], "alpha": 1.0, "x": 1}, {"shape": [2], "alpha": 2.0, "x": 2},
                                   {"shape": [3], "alpha": 1.0, "x": 1}, {"shape": [3], "alpha": 2.0, "x": 2}]


def test_tiers_nest(catalog):
    spec = catalog.by_op("ReluGrad")
    smoke, ci, nightly = (set(c.full_id for c in expand(spec, t)) for t in ("smoke", "ci", "nightly"))
    assert smoke < ci <= nightly
    assert all(c.group.tier == "smoke" for c in expand(spec, "smoke"))


def test_inputs_are_deterministic_and_per_case(catalog):
    cases = expand(catalog.by_op("GeluGrad"), "ci")
    a, b = make_inputs(cases[0]), make_inputs(cases[0])
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = make_inputs(cases[1])
    assert not np.array_equal(a["X"].ravel()[:3], other["X"].ravel()[:3])
    assert not np.array_equal(make_inputs(cases[0], global_seed=1)["X"], a["X"])


def test_adding_a_group_changes_no_other_case(spec_copy):
    path = spec_copy / "com.microsoft" / "GeluGrad.yaml"
    before = {c.full_id: make_inputs(c) for c in expand(load_catalog(spec_copy).by_op("GeluGrad"), "ci")}
    edit(path, "  groups:\n", "  groups:\n    - name: aaa_new\n      params: {shape: [[5]]}\n")
    after = {c.full_id: make_inputs(c) for c in expand(load_catalog(spec_copy).by_op("GeluGrad"), "ci")}
    assert set(after) - set(before) == {f"{d}-aaa_new/shape=5" for d in ("float32", "float64", "float16", "bfloat16")}
    for key, tensors in before.items():
        assert all(np.array_equal(tensors[n], after[key][n], equal_nan=True) for n in tensors), key


def test_inputs_take_the_case_dtype(catalog):
    for case in expand(catalog.by_op("ReluGrad"), "smoke"):
        assert {str(v.dtype) for v in make_inputs(case).values()} == {case.dtype}


def test_forward_outputs_are_the_forward_reference_rounded_once(catalog):
    case = next(c for c in expand(catalog.by_op("SigmoidGrad"), "ci") if c.id == "saturated/shape=8x16"
                and c.dtype == "float32")
    prepared = prepare(case)
    from harness.core.tensors import make_tensors
    inputs, forward_inputs = make_tensors(case)
    np.testing.assert_array_equal(inputs["Y"], sigmoid(forward_inputs["X"]).astype(np.float32))
    assert (inputs["Y"] == 1.0).any() and (inputs["Y"] == 0.0).any()  # the group's point: saturation
    assert prepared.problem is None


def test_special_values_are_planted(catalog):
    case = next(c for c in expand(catalog.by_op("ReluGrad"), "ci") if c.group.name == "special_values")
    inputs = make_inputs(case)
    x, dy = inputs["X"], inputs["dY"]
    assert np.isnan(x).sum() == 4 and np.isposinf(x).sum() == 4 and (np.signbit(x) & (x == 0)).sum() == 4
    assert np.isnan(dy).any() and np.isposinf(dy).any() and np.isneginf(dy).any()


def test_invalid_override_changes_only_the_named_input(catalog):
    case = next(c for c in expand(catalog.by_op("BiasGeluGrad_dX"), "ci") if c.group.name == "dy_shape_mismatch")
    shapes = {k: v.shape for k, v in make_inputs(case).items()}
    assert shapes == {"dY": (3, 3), "X": (2, 3), "B": (3,)}
