"""Tolerance in one module: `run`, `mutate` and `run-onnx` allow the same error for the same output, through
harness.core.tolerance.allowed_error, reduction allowance included."""
from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.backends.reference import ReferenceBackend
from harness.core import compare as compare_module
from harness.core import tolerance
from harness.core.cases import expand
from harness.run import mutate, onnx_data
from harness.run.engine import judge, prepare
from harness.run.onnx_data import export_case, run_dirs


def _long_case(catalog, dtype):
    spec = catalog.by_op("SoftmaxGrad_13")
    return next(c for c in expand(spec, None) if c.group.name == "long_reduction" and c.dtype == dtype
                and c.params == {"shape": [2, 4096], "axis": 1})


@pytest.fixture
def spy(monkeypatch):
    """Every allowed error computed by compare (run, run-onnx) and by mutate: (who, tolerance, allowance, allowed)."""
    calls = []

    def recording(who):
        def allowed_error(tol, expected, allowance=None):
            allowed = tolerance.allowed_error(tol, expected, allowance)
            calls.append((who, tol, allowance, allowed))
            return allowed
        return allowed_error

    monkeypatch.setattr(compare_module, "allowed_error", recording("compare"))
    monkeypatch.setattr(mutate, "allowed_error", recording("mutate"))
    return calls


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_run_mutate_and_run_onnx_allow_the_same_error(catalog, spy, tmp_path, dtype):
    case = _long_case(catalog, dtype)
    prepared = prepare(case)
    assert prepared.problem is None
    tol = catalog.tolerance(case.spec, dtype)

    assert judge(prepared, ReferenceBackend(), tol).status == "pass"
    (_, run_tol, run_allowance, run_allowed), = spy
    spy.clear()

    mutate_allowed = mutate.allowed_for(prepared, tol, 0)
    (_, mutate_tol, mutate_allowance, _), = spy
    spy.clear()

    export_case(prepared, tmp_path / "softmax")
    out = io.StringIO()
    assert run_dirs(catalog, [tmp_path / "softmax"], "reference", None, out=out), out.getvalue()
    (_, onnx_tol, onnx_allowance, onnx_allowed), = spy

    # the reduction allowance is there, the same array on all three routes, with its provenance on the verdicts
    assert run_allowance is not None and np.count_nonzero(run_allowance) > 0
    assert mutate_allowance is run_allowance  # mutate judges the prepared case itself
    np.testing.assert_array_equal(onnx_allowance, run_allowance)
    assert "reduction(K=4096" in run_tol.source and run_tol == onnx_tol
    assert (mutate_tol.atol, mutate_tol.rtol) == (run_tol.atol, run_tol.rtol)
    np.testing.assert_array_equal(mutate_allowed, run_allowed)
    if dtype == "float64":  # the stored outputs are the reference itself
        np.testing.assert_array_equal(onnx_allowed, run_allowed)
    else:  # run-onnx's expected values are the stored ones, the reference rounded to the dtype: the same formula on them
        stored = prepared.expected[0].astype(np.float32)
        np.testing.assert_array_equal(onnx_allowed, tolerance.allowed_error(run_tol, stored, run_allowance))


def _cancelling_softmax_dir(root, stored_dx):
    """SoftmaxGrad_13 over 4096 terms where dX cancels to 0: only the reduction allowance covers an error there."""
    dy = np.full((2, 4096), 1e5, np.float32)
    y = np.full((2, 4096), 2.0 ** -12, np.float32)  # sums to 1 exactly, so the float64 reference is 0
    node = helper.make_node("SoftmaxGrad_13", ["dY", "Y"], ["dX"], domain="com.microsoft", axis=1)
    graph = helper.make_graph([node], "softmax", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4096])
                                                  for n in ("dY", "Y")],
                              [helper.make_tensor_value_info("dX", TensorProto.FLOAT, [2, 4096])])
    model = helper.make_model(graph, ir_version=9, opset_imports=[helper.make_opsetid("", 17),
                                                                 helper.make_opsetid("com.microsoft", 1)])
    data = root / "softmax_cancel" / "test_data_set_0"
    data.mkdir(parents=True)
    onnx.save(model, str(data.parent / "model.onnx"))
    for name, value in (("input_0", dy), ("input_1", y), ("output_0", stored_dx)):
        (data / f"{name}.pb").write_bytes(numpy_helper.from_array(value).SerializeToString())
    return data.parent, dy, y


def test_run_onnx_judges_with_the_reduction_allowance(catalog, tmp_path, monkeypatch):
    spec = catalog.by_op("SoftmaxGrad_13")
    tol = catalog.tolerance(spec, "float32")
    _, dy, y = _cancelling_softmax_dir(tmp_path / "probe", np.zeros((2, 4096), np.float32))
    (allowance,), _ = tolerance.allowances(spec, {"dY": dy, "Y": y}, {"axis": 1}, "float32", [np.zeros((2, 4096))])
    stored = np.zeros((2, 4096), np.float32)
    stored[0, 0] = 0.5 * tolerance.allowed_error(tol, np.zeros(1), allowance[0, :1])[0]
    # the stored error is beyond atol + rtol * |expected| alone: without the allowance this case fails
    assert stored[0, 0] > tolerance.allowed_error(tol, stored[:1, :1])[0, 0]
    directory, _, _ = _cancelling_softmax_dir(tmp_path / "case", stored)

    out = io.StringIO()
    assert run_dirs(catalog, [directory], "reference", None, out=out), out.getvalue()
    assert out.getvalue().startswith("PASS softmax_cancel/test_data_set_0: dX")

    def lacking(*args, **kwargs):
        raise KeyError("dY")
    monkeypatch.setattr(onnx_data, "allowances", lacking)
    out = io.StringIO()
    assert not run_dirs(catalog, [directory], "reference", None, out=out)
    line = out.getvalue().splitlines()[0]
    assert line.startswith("FAIL softmax_cancel/test_data_set_0: dX") and "outside tolerance" in line
    assert "judged without the reduction allowance" in line and "KeyError" in line
