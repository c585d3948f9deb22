"""Capability probing: ORT's real support per op x dtype (one op of each class), the reading of a
probe, and the rule that a probed-unsupported (op, dtype) never produces a pass."""
import json
from dataclasses import dataclass

import numpy as np
import pytest

from harness import backends as registry
from harness.backends.base import Backend, Support
from harness.backends.ort_probe import classify_error, classify_run
from harness.backends.reference import ReferenceBackend
from harness.cli import main
from harness.core.cases import expand
from harness.run import probe
from harness.run.engine import judge, prepare
from harness.run.rundir import read_results


@pytest.mark.parametrize("op, dtype, status, how, evidence", [
    ("ReluGrad", "float32", "supported", "kernel", "float32 ReluGrad kernel on CPUExecutionProvider"),
    ("SoftmaxGrad", "float64", "supported", "function_body", "inlined function body on CPUExecutionProvider: Mul"),
    ("ReluGrad", "float16", "supported", "cast+kernel", "computed in float32, not float16; ReluGrad kernel"),
    ("SoftmaxGrad", "float16", "supported", "cast+function_body", "computed in float32, not float16; inlined function body"),
    ("GeluGrad", "float64", "no_kernel", "", "inlined as its function body, whose Erf(13) node has no float64 kernel"),
    ("SoftmaxGrad_13", "bfloat16", "no_kernel", "", "no bfloat16 kernel registered for SoftmaxGrad_13"),
    ("LogSoftmaxGrad", "bfloat16", "not_registered", "", "the op schema does not accept bfloat16"),
])
def test_ort_classification(ort, catalog, op, dtype, status, how, evidence):
    support = probe.capability(ort, catalog.by_op(op), dtype)
    assert (support.status, support.how) == (status, how), support
    assert evidence in support.reason


def test_reference_follows_the_spec_s_type_constraints(catalog):
    reference = ReferenceBackend()
    assert probe.capability(reference, catalog.by_op("SoftmaxGrad"), "bfloat16") == Support(
        "supported", "reference", "float64 NumPy reference, rounded once to bfloat16")
    refused = probe.capability(reference, catalog.by_op("LogSoftmaxGrad"), "bfloat16")
    assert refused.status == "not_registered" and "allows float32, float64, float16" in refused.reason


def test_an_unavailable_backend_is_unavailable_everywhere(catalog):
    cuda = registry.create("ort-cuda")
    try:
        reason = cuda.availability()
        support = probe.capability(cuda, catalog.by_op("ReluGrad"), "float32")
    finally:
        cuda.close()
    if reason is None:
        pytest.skip("this machine has a working CUDA provider")
    assert support == Support("unavailable", reason=reason)


def kernel(op, provider="CPUExecutionProvider", inputs=("float",), outputs=("float",)):
    return {"op": op, "provider": provider, "inputs": list(inputs), "outputs": list(outputs)}


def test_reading_a_profiled_run(catalog):
    spec = catalog.by_op("SoftmaxGrad_13")
    assert classify_run(spec, "float32", [kernel("SoftmaxGrad_13")], "CPUExecutionProvider").how == "kernel"
    # ORT fell back to CPU for a node: the CUDA backend has no kernel, however well the case would run.
    fallback = classify_run(spec, "float32", [kernel("SoftmaxGrad_13")], "CUDAExecutionProvider")
    assert fallback.status == "no_kernel" and "fell back to CPUExecutionProvider" in fallback.reason
    # Shape-only nodes of a function body read the original float16 tensor; the arithmetic ran in float32.
    body = [kernel("Cast", inputs=["float16"]), kernel("Shape", inputs=["float16"], outputs=["int64"]),
            kernel("Mul"), kernel("ReduceSum", inputs=["float", "int64"]), kernel("Cast", outputs=["float16"])]
    assert classify_run(spec, "float16", body, "CPUExecutionProvider").how == "cast+function_body"
    assert classify_run(spec, "float32", [kernel("Cast")], "CPUExecutionProvider").status == "error"


def test_reading_a_refusal():
    assert classify_error("ReluGrad", "float64", "session", "NotImplemented",
                          "Could not find an implementation for ReluGrad(1) node with name ''").status == "no_kernel"
    assert classify_error("LogSoftmaxGrad", "bfloat16", "session", "InvalidGraph",
                          "Type Error: Type 'tensor(bfloat16)' of input parameter (dY)").status == "not_registered"
    failed = classify_error("ReluGrad", "float32", "run", "RuntimeException", "axis 3 is not in valid range")
    assert failed.status == "error" and not failed.gates  # a failed probe cannot tell: the cases run


@dataclass
class SilentBackend(Backend):
    """Runs every dtype (returning the reference's own outputs), but has no float64 kernel: what a
    backend that silently converts, or falls back to another device, looks like from outside."""
    runs: int = 0

    def __post_init__(self):
        self.name = "silent"

    def run(self, request):
        self.runs += 1
        return ReferenceBackend().run(request)

    def probe(self, request):
        if request.dtype == "float64":
            return Support("no_kernel", reason="float64 is converted to float32 behind the caller's back")
        return Support("supported", "kernel", "test double")


def test_a_probed_unsupported_dtype_is_never_run_nor_passed(catalog):
    spec = catalog.by_op("TanhGrad")
    backend = SilentBackend()
    by_dtype = {}
    for case in expand(spec, "ci"):
        result = judge(prepare(case), backend, catalog.tolerance(spec, case.dtype))
        by_dtype.setdefault(case.dtype, set()).add(result.status)
    assert by_dtype["float64"] == {"unsupported"}
    assert by_dtype["float32"] == {"pass"}
    float64_cases = sum(1 for c in expand(spec, "ci") if c.dtype == "float64")
    assert backend.runs == sum(1 for c in expand(spec, "ci")) - float64_cases


def test_run_writes_the_capability_matrix_and_counts_unsupported_apart(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(registry.FACTORIES, "silent", SilentBackend)
    code = main(["run", "--ops", "TanhGrad,LogSoftmaxGrad", "--backends", "reference,silent", "--tier", "smoke",
                 "--out", str(tmp_path / "r")])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    rows = {(r["backend"], r["op"], r["dtype"]): r for r in summary["capabilities"]}
    assert rows[("silent", "TanhGrad", "float64")]["status"] == "no_kernel"
    assert rows[("reference", "LogSoftmaxGrad", "float16")]["how"] == "reference"
    assert ("silent", "LogSoftmaxGrad", "bfloat16") not in rows  # only the dtypes the run's cases use
    records = read_results(tmp_path / "r")
    silent64 = [r for r in records if r["backend"] == "silent" and r["dtype"] == "float64"]
    assert silent64 and {r["status"] for r in silent64} == {"unsupported"}
    table = {(row["op"], row["backend"]): row for row in summary["table"]}
    assert table[("TanhGrad", "silent")]["unsupported"] == sum(1 for r in silent64 if r["op"] == "TanhGrad")


def test_probe_command_prints_the_matrix(capsys, tmp_path):
    code = main(["probe", "--ops", "ReluGrad,LogSoftmaxGrad", "--backends", "reference", "--dtypes", "float32,bfloat16",
                 "--json", str(tmp_path / "m.json")])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["op", "dtype", "reference"]
    assert lines[2].split() == ["LogSoftmaxGrad", "float32", "reference"]
    assert lines[3].split() == ["LogSoftmaxGrad", "bfloat16", "not", "registered"]
    assert "LogSoftmaxGrad bfloat16 [reference] not registered: the spec's type constraint T allows" in out
    assert len(json.loads((tmp_path / "m.json").read_text())) == 4


def test_probe_command_rejects_unknown_names(capsys):
    assert main(["probe", "--dtypes", "float8"]) == 2
    assert "unknown dtype 'float8'" in capsys.readouterr().err


def test_probe_request_casts_the_main_type_only(catalog):
    request = probe.probe_request(catalog.by_op("SoftmaxGrad"), "bfloat16")
    assert [np.dtype(v.dtype).name for v in request.inputs] == ["bfloat16", "bfloat16"]
    assert all(v.size > 0 for v in request.inputs)
