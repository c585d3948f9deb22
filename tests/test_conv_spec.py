"""The ConvGrad spec through the harness: validity decided before any backend, the output-subset
check, the per-group timeout, and (when onnxruntime-training is installed) its auto_pad divergence."""
from dataclasses import dataclass, replace

import numpy as np
import pytest
from conftest import cases_of, run_on

from harness.backends.base import Backend, Outputs, TimedOut
from harness.backends.ort import OrtBackend
from harness.backends.reference import ReferenceBackend
from harness.core.cases import expand
from harness.core.spec_loader import load_catalog
from harness.run.engine import judge, prepare, request_for
from harness.run.self_consistency import OUTPUT_SUBSET
from reference.forward.conv import conv_resolved_pads
from reference.ops.conv_grad import conv_grad


def test_ci_tier_has_the_cases_the_issue_asks_for(catalog):
    cases = cases_of(catalog, "ConvGrad")
    valid = [c for c in cases if c.valid]
    assert len(valid) >= 150
    ranks = {len(c.params["X"]) - 2 for c in valid if "X" in c.params}
    assert ranks == {1, 2, 3}
    written = [c.attributes for c in valid]
    assert {a.get("auto_pad", "NOTSET") for a in written} == {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}
    depthwise = [c for c in valid if c.attributes.get("group", 1) == c.params["X"][1] > 1]
    assert depthwise, "no depthwise case"
    assert any(c.params["X"][0] == 1 for c in valid), "no batch-1 case"
    asymmetric = [c for c in valid if (p := c.attributes.get("pads")) and p[: len(p) // 2] != p[len(p) // 2:]]
    assert asymmetric
    subsets = {tuple(c.params["outputs"]) for c in valid if "outputs" in c.params}
    assert len(subsets) == 6  # every proper, non-empty subset of (dX, dW, dB)


@pytest.mark.parametrize("case", [c for c in expand(load_catalog().by_op("ConvGrad"), "ci") if c.valid],
                         ids=lambda c: c.full_id)
def test_every_valid_case_passes_the_contract_and_the_reference(catalog, case):
    results = run_on(ReferenceBackend(), catalog, case)
    assert [r.status for r in results] == ["pass"] * len(results), results[0].detail


# What the reference's rejection must name for each invalid group: the one definition of validity
# (harness.core.contract, reference.forward.conv:conv_check) decides, and says why.
REJECTION_NAMES = {
    "dy_shape_mismatch": "dY shape", "dy_too_small": "dY shape", "bad_strides": "strides", "pads_too_short": "pads",
    "dilations_too_short": "dilations", "pads_too_long": "pads", "dilations_zero": "dilations",
    "negative_pads": "pads", "kernel_larger_than_input": "empty spatial output", "x_rank_2": "rank",
    "spatial_zero_h": "empty spatial output", "spatial_zero_w": "empty spatial output",
    "pads_with_same": "cannot be combined with auto_pad", "auto_pad_unknown": "auto_pad",
    "group_mismatch": "group", "kernel_shape_mismatch": "kernel_shape", "rank_mismatch": "rank",
}


def test_every_invalid_group_is_named_here(catalog):
    assert {g.name for g in catalog.by_op("ConvGrad").cases.invalid} == set(REJECTION_NAMES)


@pytest.mark.parametrize("case", [c for c in expand(load_catalog().by_op("ConvGrad"), "ci") if not c.valid],
                         ids=lambda c: c.full_id)
def test_the_reference_rejects_every_invalid_case_naming_the_problem(catalog, case):
    result = run_on(ReferenceBackend(), catalog, case)[0]
    assert result.status == "pass" and result.detail.startswith("rejected as expected"), result.detail
    assert REJECTION_NAMES[case.group.name] in result.detail


def test_an_invalid_combination_in_a_valid_group_never_reaches_a_backend(spec_copy):
    """valid_if is asked for every valid case when the specs load: the spec is refused, one line."""
    from harness.spec.errors import SpecError

    path = spec_copy / "com.microsoft" / "ConvGrad.yaml"
    path.write_text(path.read_text().replace("  groups:\n", "  groups:\n    - name: aaa_wrong_dy\n      params: {X: [[2, 4, 7, 6]], "
                                             "M: [6], kernel_shape: [[3, 3]], dY: [[2, 6, 4, 4]]}\n", 1))
    with pytest.raises(SpecError) as refused:
        load_catalog(spec_copy)
    [problem] = refused.value.problems
    assert problem.field == "cases.groups[0]" and "move such params to cases.invalid" in problem.message
    assert "valid_if rejects it (dY shape [2, 6, 4, 4] != conv output shape [2, 6, 5, 4])" in problem.message


def test_auto_pad_cases_have_nonzero_resolved_pads_and_the_others_zero(catalog):
    """The ORT divergence is declared for the `auto_pad` group only; SAME with zero pads is right there."""
    for case in cases_of(catalog, "ConvGrad"):
        if case.group.name in ("auto_pad", "auto_pad_no_padding") and case.attributes["auto_pad"] != "NOTSET":
            inputs = prepare(case).inputs
            pads = conv_resolved_pads(inputs["X"].shape, inputs["W"].shape, case.attributes)
            assert any(pads) == (case.group.name == "auto_pad"), case.id


# --- the output-subset check ---------------------------------------------------------------------------------

@dataclass
class SubsetDrift(Backend):
    """Like a kernel whose dW path changes when dX is not requested: one element one ULP off."""

    def __post_init__(self):
        self.name = "drift"

    def run(self, request):
        outcome = ReferenceBackend().run(request)
        dx, dw, db = outcome.values
        if not request.outputs[0] and dw is not None:
            dw = dw.copy()
            dw.flat[0] = np.nextafter(dw.flat[0], np.inf)
        return Outputs([dx, dw, db])


def subset_cases(catalog):
    return [c for c in cases_of(catalog, "ConvGrad") if c.group.name == "output_subsets"]


def test_subset_runs_are_compared_bitwise_with_the_full_run(catalog):
    for case in subset_cases(catalog):
        results = run_on(ReferenceBackend(), catalog, case)
        assert [r.check for r in results] == ["reference", OUTPUT_SUBSET]
        assert results[1].status == "pass" and "bitwise equal" in results[1].detail


def test_a_full_run_gets_no_subset_check(catalog):
    case = next(c for c in cases_of(catalog, "ConvGrad") if c.group.name == "conv2d")
    assert [r.check for r in run_on(ReferenceBackend(), catalog, case)] == ["reference"]


def test_a_subset_that_differs_from_the_full_run_by_one_ulp_fails(catalog):
    first_geometry = subset_cases(catalog)[0].params["X"]  # X [2, 3, 9, 8], W [4, 3, 3, 2]: 72 elements in dW
    outcomes = {tuple(c.params["outputs"]): run_on(SubsetDrift(), catalog, c) for c in subset_cases(catalog)
                if c.params["X"] == first_geometry}
    first, check = outcomes[("dW",)]
    assert first.status == "pass"  # one ULP is well within tolerance: only the bitwise check sees it
    assert check.check == OUTPUT_SUBSET and check.status == "fail" and check.failure == "wrong_values"
    assert "dW: 1 of 72 float32 elements differ" in check.detail
    assert outcomes[("dX", "dW")][1].status == "pass"  # dX requested: the drift does not happen


# --- the per-group timeout -----------------------------------------------------------------------------------

def test_a_group_timeout_travels_with_the_request(catalog):
    case = next(c for c in cases_of(catalog, "ConvGrad") if c.group.name == "dilations_too_short")
    assert case.group.timeout == 3
    assert request_for(prepare(case)).timeout == 3
    other = next(c for c in cases_of(catalog, "ConvGrad") if c.group.name == "conv2d")
    assert request_for(prepare(other)).timeout is None


class RecordingWorker:
    def __init__(self):
        self.timeouts = []

    def call(self, request, timeout=None):
        self.timeouts.append(timeout)
        return TimedOut(timeout)


@pytest.mark.parametrize("run_timeout, group_timeout, used", [(20.0, 3.0, 3.0), (20.0, None, 20.0), (2.0, 3.0, 2.0)])
def test_the_ort_backend_waits_for_the_shorter_of_the_two_limits(catalog, run_timeout, group_timeout, used):
    case = next(c for c in cases_of(catalog, "ConvGrad") if c.group.name == "dilations_too_short")
    backend = OrtBackend(timeout=run_timeout)
    backend._worker = RecordingWorker()
    outcome = backend.run(replace(request_for(prepare(case)), timeout=group_timeout))
    assert backend._worker.timeouts == [used] and outcome == TimedOut(used)


def test_a_hang_within_the_group_timeout_is_reported_as_a_declared_hang(catalog):
    """A backend that times out on a case whose divergence allows a hang: divergent, not crashed."""
    case = next(c for c in cases_of(catalog, "ConvGrad") if c.group.name == "dilations_too_short")

    @dataclass
    class Hangs(Backend):
        def __post_init__(self):
            self.name = "ort"

        def run(self, request):
            return TimedOut(request.timeout)

    result = judge(prepare(case), Hangs(), catalog.tolerance(case.spec, case.dtype))
    assert result.failure == "hang" and result.status == "divergent"
    assert result.divergence == "ort-convgrad-short-attribute-oob"
    assert "within its 3 s `timeout` of group dilations_too_short" in result.detail


# --- onnxruntime-training, when installed: the evidence behind the auto_pad divergence -------------------------

def test_ort_computes_same_padding_as_no_padding(ort, catalog):
    case = next(c for c in cases_of(catalog, "ConvGrad") if c.group.name == "auto_pad"
                and c.attributes.get("auto_pad") == "SAME_UPPER" and len(c.params["X"]) == 4)
    request = request_for(prepare(case))
    same = ort.run(request)
    no_pads = ort.run(replace(request, attributes={k: v for k, v in request.attributes.items() if k != "auto_pad"}))
    for a, b in zip(same.values, no_pads.values):
        np.testing.assert_array_equal(a, b)
    dy, x, w = (v.astype(np.float64) for v in request.inputs)
    dx, dw, db = conv_grad(dy, x, w, **{k: v for k, v in request.attributes.items()})
    assert np.abs(same.values[0] - dx).max() > 1 and np.abs(same.values[1] - dw).max() > 1
    np.testing.assert_allclose(same.values[2], db, rtol=1e-5, atol=1e-5)
