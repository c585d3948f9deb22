"""Failure diagnosis: a deliberately wrong kernel is named by the alternative semantics it computes."""
from dataclasses import dataclass

import numpy as np
import pytest

from harness import backends as registry
from harness.backends.base import Backend, Outputs
from harness.cli import main
from harness.core.cases import expand
from harness.core.dtypes import NUMPY
from harness.core.shapes import resolve_attributes
from harness.run.engine import judge, prepare
from harness.run.rundir import read_results
from harness.spec.dotted import resolve

LEGACY = "legacy SoftmaxGrad axis semantics (coerced to 2-D at axis)"


@dataclass
class WrongKernel(Backend):
    """Computes `function` (a reference-like dotted path) instead of the op, rounded to the case dtype."""
    function: str = "wrong_references:softmax_grad_13_with_legacy_axis"

    def __post_init__(self):
        self.name = "wrong-kernel"

    def run(self, request):
        inputs = {k: None if v is None else v.astype(np.float64) for k, v in request.named_inputs().items()}
        with np.errstate(all="ignore"):
            out = resolve(self.function)(**inputs, **resolve_attributes(request.spec, request.attributes))
            return Outputs([np.asarray(out).astype(NUMPY[request.dtype])])


def judge_all(catalog, op, function, groups=None, dtypes=("float32",)):
    spec = catalog.by_op(op)
    backend = WrongKernel(function=function)
    return [judge(prepare(c), backend, catalog.tolerance(spec, c.dtype)) for c in expand(spec, "ci")
            if c.valid and c.dtype in dtypes and (groups is None or c.group.name in groups)]


def test_legacy_axis_kernel_for_softmaxgrad_13_is_named(catalog):
    results = judge_all(catalog, "SoftmaxGrad_13", "wrong_references:softmax_grad_13_with_legacy_axis",
                        groups={"rank2", "rank3", "rank4", "rank5", "rank6"})
    failed = [r for r in results if r.status == "fail"]
    assert len(failed) >= 20
    for r in failed:
        assert r.diagnosis["matches"] == LEGACY, (r.case, r.diagnosis)
        assert r.detail.startswith(f"matches {LEGACY} (max abs err ")
        assert float(r.diagnosis["candidates"][0]["max_abs"]) < 1e-6 < r.outputs["dX"]["max_abs"]
    # Where the conventions agree (the last axis, or only size-1 dims after it) the kernel is right.
    passed = {r.case for r in results if r.status == "pass"}
    assert "rank3/shape=2x3x5;axis=2" in passed and "rank4/shape=2x1x4x3;axis=-1" in passed
    assert "rank3/shape=2x3x5;axis=0" not in passed


@pytest.mark.parametrize("op, function, name, groups", [
    ("SoftmaxGrad", "reference.ops.softmax:softmax_grad_13", "single-axis Softmax-13 semantics (SoftmaxGrad_13)", {"rank4"}),
    ("SoftmaxGrad_13", "reference.ops.softmax:log_softmax_grad_13", "LogSoftmax gradient formula (dY - exp(Y) * sum(dY))", {"rank3"}),
    ("LogSoftmaxGrad_13", "reference.ops.softmax:log_softmax_grad",
     "legacy LogSoftmaxGrad axis semantics (coerced to 2-D at axis)", {"rank3"}),
    ("GeluGrad", "reference.ops.activations:fast_gelu_grad", "tanh approximation of GELU (FastGeluGrad)", {"basic", "wide_range"}),
    ("ReluGrad", "reference.ops.activations:relu_grad_as_product",
     "mask multiplied, not selected (NaN/inf in dY leak where X <= 0)", {"special_values"}),
    ("SigmoidGrad", "reference.ops.activations:sigmoid_grad_of_input",
     "second input taken as Sigmoid's input X, not its output Y", {"basic"}),
    ("TanhGrad", "wrong_references:tanh_grad_transposed", "output transposed", {"basic"}),
    ("TanhGrad", "reference.ops.activations:sigmoid_grad", "SigmoidGrad formula dY * Y * (1 - Y)", {"basic"}),
])
def test_each_alternative_is_recognised(catalog, op, function, name, groups):
    failed = [r for r in judge_all(catalog, op, function, groups) if r.status == "fail"]
    assert failed
    assert {r.diagnosis["matches"] for r in failed} == {name}


def test_a_kernel_matching_nothing_says_so(catalog):
    failed = [r for r in judge_all(catalog, "SoftmaxGrad_13", "wrong_references:softmax_grad_13_next_axis", {"rank3"})
              if r.status == "fail"]
    assert failed
    for r in failed:
        assert r.diagnosis["matches"] is None
        assert "matches none of the" in r.diagnosis["summary"] and "diagnosis: matches none" in r.detail


def test_right_values_need_no_diagnosis(catalog):
    results = judge_all(catalog, "SoftmaxGrad_13", "reference.ops.softmax:softmax_grad_13", {"rank3"}, ("float32", "float64"))
    assert {r.status for r in results} == {"pass"} and all(r.diagnosis is None for r in results)


def test_failure_lines_and_results_carry_the_diagnosis(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(registry.FACTORIES, "wrong-kernel", WrongKernel)
    code = main(["run", "--ops", "SoftmaxGrad_13", "--backends", "wrong-kernel", "--cases", "float32-rank3/*",
                 "--out", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 1
    assert f"FAIL SoftmaxGrad_13 [wrong-kernel] float32-rank3/shape=2x3x5;axis=0: matches {LEGACY} (max abs err" in out
    records = read_results(tmp_path / "r")
    assert {r["diagnosis"]["matches"] for r in records if r["status"] == "fail"} == {LEGACY}
