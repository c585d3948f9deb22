"""`onnx-backend:MODULE[@DEVICE]`: any module with the ONNX backend API runs our one-node models in an
isolated worker. onnxruntime.backend through it must be the `ort` backend, bitwise, on every ci case."""
import os
from pathlib import Path

import numpy as np
import pytest

from harness import backends as registry
from harness.backends.base import Crashed, Outputs, Rejected, Request, TimedOut, Unsupported
from harness.backends.onnx_backend import OnnxBackendAdapter, parse
from harness.core import sequences
from harness.core.cases import expand
from harness.run.engine import matching_divergences, prepare, request_for
from harness.run.rundir import read_results

ORT_BACKEND = "onnx-backend:onnxruntime.backend"
PLUGINS = Path(__file__).parent / "plugins"


@pytest.mark.parametrize("name, parsed", [
    ("onnx-backend:onnxruntime.backend", ("onnxruntime.backend", "CPU", {})),
    ("onnx-backend:my_rt.backend@CUDA", ("my_rt.backend", "CUDA", {})),
])
def test_names_parse(name, parsed):
    assert parse(name) == parsed
    assert registry.create(name).name == name


@pytest.mark.parametrize("name", ["onnx-backend:", "onnx-backend:1x", "onnx-backend:a..b", "onnx-backend:a@"])
def test_bad_names_show_the_syntax(name):
    with pytest.raises(registry.UnknownBackend, match=r"write onnx-backend:MODULE\[@DEVICE\]"):
        registry.check(name)


def test_a_module_that_does_not_import_is_unavailable_with_the_error():
    backend = registry.create("onnx-backend:no_such_module")
    try:
        assert "import no_such_module failed: ModuleNotFoundError" in backend.availability()
    finally:
        backend.close()


def relu(catalog):
    spec = catalog.by_op("ReluGrad")
    return Request(spec, "float32", [np.array([1.0, 2.0, 3.0], np.float32), np.array([-1.0, 0.0, 1.0], np.float32)],
                   {}, (True,))


@pytest.mark.parametrize("behaviour, outcome, says", [
    ("", Outputs, ""),
    ("skip", Unsupported, "SkipTest: com.microsoft opset not released"),
    ("notimplemented", Unsupported, "NotImplementedError: no ReluGrad here"),
    ("valueerror", Rejected, "ValueError at session: bad model"),
    ("segfault", Crashed, "SIGSEGV"),
])
def test_what_a_module_says_becomes_a_result(catalog, monkeypatch, behaviour, outcome, says):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FAKE_ONNX_BACKEND", behaviour)
    backend = OnnxBackendAdapter(module="fake_onnx_backend", device="CPU")
    try:
        assert backend.availability() is None and backend.divergences_from is None
        result = backend.run(relu(catalog))
        assert isinstance(result, outcome), result
        if outcome is Outputs:
            np.testing.assert_array_equal(result.values[0], [0.0, 0.0, 3.0])
        else:
            assert says in str(result)
    finally:
        backend.close()


@pytest.fixture(scope="module")
def pair():
    adapter, ort = registry.create(ORT_BACKEND), registry.create("ort")
    if reason := ort.availability():
        pytest.skip(reason)
    assert adapter.availability() is None
    yield adapter, ort
    adapter.close()
    ort.close()


def kind(case, outcome) -> str:
    """What must agree: an invalid input ORT accepts without checking reads out of bounds, which may
    crash, hang (until the group's timeout) or return whatever memory held (specs declare all three, e.g.
    ConvGrad's dilations_too_short), so there only the refusals must match."""
    if not case.valid and isinstance(outcome, (Outputs, Crashed, TimedOut)):
        return "accepted invalid input (undefined behaviour)"
    return type(outcome).__name__


def test_onnxruntime_backend_is_the_ort_backend_bitwise_on_every_ci_case(catalog, pair):
    adapter, ort = pair
    assert adapter.divergences_from == "ort" and adapter.environment()["version"]
    compared, kinds = 0, set()
    for spec in catalog.specs:
        if spec.subject != "kernel":  # a training-graph spec is no node either runs (the probe says so first)
            continue
        for case in expand(spec, "ci"):
            prepared = prepare(case)
            if prepared.problem:
                continue
            request = request_for(prepared)
            mine, theirs = adapter.run(request), ort.run(request)
            where = f"{spec.op} {case.full_id}"
            assert kind(case, mine) == kind(case, theirs), f"{where}: {type(mine).__name__} vs {type(theirs).__name__}"
            kinds.add(type(mine).__name__)
            if isinstance(mine, (Rejected, Unsupported)):
                assert mine == theirs, where  # the same message: the same classification of the same error
            if isinstance(mine, Outputs) and case.valid:  # an accepted invalid input reads undefined memory
                # so may an output declared wrong (LSTMTraining's Ct at seq_length 0 is a buffer ORT never writes)
                undefined = {name for d in matching_divergences(prepared, "ort") if "wrong_values" in d.results
                             for name in (d.outputs or [o.name for o in spec.outputs])}
                for a, b, output in zip(mine.values, theirs.values, spec.outputs):
                    assert (a is None) == (b is None), where
                    if a is not None:
                        assert sequences.shape_of(a) == sequences.shape_of(b), where  # a sequence: the same element shapes
                        a, b = sequences.flat(a), sequences.flat(b)  # and the same values, joined
                        assert a.dtype == b.dtype and a.shape == b.shape, where
                        assert output.name in undefined or np.array_equal(a, b, equal_nan=True), where
            compared += 1
    assert compared > 1000 and {"Outputs", "Rejected", "Unsupported"} <= kinds


def test_a_run_applies_the_ort_divergences_to_it(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--backends", f"reference,{ORT_BACKEND}", "--ops",
                           "GeluGrad", "--out", str(tmp_path), "--no-progress", "--no-report"],
                          cwd=Path(__file__).parent.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = read_results(tmp_path)
    mine = [r for r in records if r["backend"] == ORT_BACKEND]
    assert mine and any(r["status"] == "divergent" for r in mine)  # GeluGrad's `ort` divergences, declared once
