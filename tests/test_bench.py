"""`opconform bench`: figures for every selected workload and backend, in the report's schema, with
problems recorded instead of ending the run. Timings are never asserted (a benchmark, not a timed test)."""
import dataclasses
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from harness.backends.base import Crashed
from harness.bench import runner
from harness.bench.runner import BenchError, BenchOptions, run_bench, select, table
from harness.bench.workloads import WorkloadError, spec_workloads, workloads
from harness.cli import main
from harness.report import bench as report_bench
from harness.spec.model import Generator


def test_every_workload_has_a_spec_and_valid_inputs(catalog):
    from harness.core.contract import input_problems

    for w in workloads(catalog, sizes=["small"]):
        spec = catalog.by_op(w.op)
        inputs = dict(zip([i.name for i in spec.inputs], w.inputs()))
        assert input_problems(spec, inputs, w.attributes) == [], (w.op, w.size)
        assert (w.bytes is None) != (w.flops is None)  # each row states exactly one throughput basis
    assert {w.op for w in workloads(catalog)} <= set(catalog.all_ops)  # a new op may come without a benchmark


def test_a_workload_is_a_case_of_its_spec(catalog):
    """Bench inputs are made by the case machinery a run uses: the same values as the case built from the
    bench size, drawn from the spec's generators, the derived ones from the forward reference."""
    from harness.core.tensors import make_inputs

    (w,) = workloads(catalog, ops=["SigmoidGrad"], sizes=["small"])
    spec = catalog.by_op("SigmoidGrad")
    made = make_inputs(w.case)
    assert [a.tobytes() for a in w.inputs()] == [made[i.name].tobytes() for i in spec.inputs]
    dy, y = w.inputs()
    assert y.dtype == np.float32 and 0 < y.min() and y.max() < 1  # Y is Sigmoid's output, not a second draw
    (w,) = workloads(catalog, ops=["DropoutGrad"], sizes=["small"])
    assert float(w.inputs()[2]) == np.float32(0.1) and abs(w.inputs()[1].mean() - 0.9) < 0.02  # bench.inputs


def _with_bench_size(spec, **params):
    size = spec.bench.sizes["small"].model_copy(update={"params": params})
    return spec.model_copy(update={"bench": spec.bench.model_copy(update={"sizes": {"small": size}})})


def test_a_bench_size_that_breaks_valid_if_is_a_spec_error(catalog):
    """A size whose params the spec's valid_if rejects (SoftmaxGrad's axis past dY's rank) fails validate with
    one line naming the field, and its workload refuses to make inputs."""
    from harness.core.bench_spec import bench_problems

    spec = catalog.by_op("SoftmaxGrad")
    assert bench_problems(spec) == []
    bad = _with_bench_size(spec, shape=[64, 128], axis=2)
    problems = bench_problems(bad)
    assert len(problems) == 1 and problems[0][0] == "bench.sizes.small" and "valid_if rejects it" in problems[0][1]
    with pytest.raises(WorkloadError, match="SoftmaxGrad bench size small: valid_if rejects it"):
        spec_workloads(bad)[0].inputs()


def test_a_bench_size_whose_values_break_the_contract_is_refused(catalog):
    """Values are checked as a run checks a valid case's: DropoutGrad with ratio 1 (outside [0, 1))."""
    spec = catalog.by_op("DropoutGrad")
    size = spec.bench.sizes["small"].model_copy(update={"inputs": {"ratio": Generator(values=[1.0])}})
    bad = spec.model_copy(update={"bench": spec.bench.model_copy(update={"sizes": {"small": size}})})
    with pytest.raises(WorkloadError, match="ratio holds 1"):
        spec_workloads(bad)[0].inputs()


@pytest.mark.parametrize("field, value, expect", [
    ("bytes", "reference.ops.activations:no_such_hook", "bench.bytes"),
    ("torch", "reference.ops.activations:gelu_derivative", "bench.torch"),  # takes X alone, not (inputs, attributes)
    ("flops", "reference.ops.activations:bench_bytes", "bench"),  # bytes and flops both given
])
def test_bad_bench_hooks_are_spec_errors_naming_the_field(catalog, field, value, expect):
    from harness.core.bench_spec import bench_problems

    spec = catalog.by_op("ReluGrad")
    bad = spec.model_copy(update={"bench": spec.bench.model_copy(update={field: value})})
    assert [f for f, _ in bench_problems(bad)] == [expect]


def test_an_unknown_bench_param_is_a_spec_error(catalog):
    from harness.core.bench_spec import bench_problems

    bad = _with_bench_size(catalog.by_op("ReluGrad"), shape=[4096], alhpa=0.1)
    ((field, message),) = bench_problems(bad)
    assert field == "bench.sizes.small" and "alhpa" in message


def test_cli_writes_the_report_schema(tmp_path, capsys):
    out = tmp_path / "bench.json"
    code = main(["bench", "--quick", "--sizes", "small", "--ops", "ReluGrad,SoftmaxGrad_13,ConvGrad",
                 "--backends", "openmp,reference", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "ReluGrad" in printed and "ConvGrad" in printed and f"bench: {out}" in printed
    doc = json.loads(out.read_text())
    assert doc["schema"] == "opconform-bench/1" and doc["threads"] == 1  # one thread unless asked: a shared machine
    assert doc["quick"] is True and "rough figures" in printed  # --quick says its figures are rough
    assert set(doc["load_average"]) == {"start", "end"} and "1-minute load average" in printed
    assert [(r["op"], r["size"]) for r in doc["results"]] == [  # in catalog order
        ("ConvGrad", "small"), ("ReluGrad", "small"), ("SoftmaxGrad_13", "small")]
    for row in doc["results"]:
        assert set(row["median_s"]) == {"openmp", "reference"} and all(t > 0 for t in row["median_s"].values())
        basis, per_s = ("bytes", "gbs") if row["bytes"] else ("flops", "gflops")
        assert row[per_s]["openmp"] == pytest.approx(row[basis] / row["median_s"]["openmp"] / 1e9)
    parsed = report_bench.parse(doc, str(out))  # what the HTML report will show
    assert parsed.problems == [] and len(parsed.rows) == 3 and parsed.backends == ["openmp", "reference"]
    assert "kernels compiler" in parsed.environment


def test_limits_are_measured_and_shown(catalog, tmp_path):
    out = tmp_path / "b.json"
    doc = run_bench(catalog, BenchOptions(ops=["ReluGrad"], sizes=["small"], backends=["openmp"], bandwidth=True,
                                          quick=True, out=out), log=lambda message: None)
    limits = json.loads(out.read_text())["limits"]
    assert limits["triad_gbs"] > 0 and limits["triad_4m_gbs"] > 0 and limits["sgemm_gflops"] > 0  # figures, not speed checks
    assert f"triad {limits['triad_gbs']:.1f} GB/s" in table(doc)
    row = doc["results"][0]  # a memory-bound row: compared with a triad on its own bytes, timed beside it
    assert row["triad_gbs"] > 0 and f"({row['gbs']['openmp'] / row['triad_gbs']:4.0%} of limit)" in table(doc)


@pytest.mark.parametrize("level, core, above", [
    ("avx2", "SkylakeX", True), ("avx2", "SapphireRapids", True), ("avx2", "Haswell", False), ("avx2", "Zen", False),
    ("baseline", "Haswell", True), ("baseline", "Sandybridge", True), ("baseline", "Katmai", False),
    ("avx512", "SkylakeX", False)])
def test_an_openblas_core_above_the_level_is_a_problem(level, core, above):
    """A row is only at its level if the BLAS under the kernels is: OpenBLAS loaded before the bench set
    OPENBLAS_CORETYPE keeps the CPU's widest core, and the figures must say so."""
    problem = runner.blas_core_problem(level, core, "the openmp backend")
    assert (problem is not None) == above
    assert problem is None or (core in problem and level in problem)


def test_each_level_holds_openblas_to_it():
    assert set(runner.BLAS_CORETYPE) == set(runner.TORCH_ISA_ENV)
    for level, core in runner.BLAS_CORETYPE.items():
        env = runner.level_env(level)
        assert env["OPENBLAS_CORETYPE"] == core and env["OPCONFORM_ISA"] == level
        assert runner.blas_core_problem(level, core, "x") is None  # the core asked for is not above its level


def test_the_sgemm_limit_names_its_core(catalog, tmp_path):
    """The limit is measured at the level's core as well, and the table says which."""
    doc = run_bench(catalog, BenchOptions(ops=["LSTMGrad"], sizes=["small"], backends=["openmp"], bandwidth=True,
                                          quick=True, out=tmp_path / "b.json"), log=lambda message: None)
    core = doc["limits"]["sgemm_core"]
    assert core and f"(OpenBLAS {core})" in table(doc)
    row = doc["results"][0]  # a compute-bound row carries its level's sgemm limit
    assert row["sgemm_gflops"] == doc["limits"]["sgemm_gflops"]
    assert f"({row['gflops']['openmp'] / row['sgemm_gflops']:4.0%} of limit)" in table(doc)


def test_a_crashing_backend_is_a_problem_not_the_end(catalog, tmp_path, monkeypatch):
    class Crashing:
        name = "openmp"

        def availability(self):
            return None

        def time(self, request, budget):
            return Crashed("SIGSEGV", "boom")

        def environment(self):
            return {}

        def close(self):
            pass

    real_create = runner.create
    monkeypatch.setattr(runner, "create", lambda name, threads: Crashing() if name == "openmp" else real_create(name, threads=threads))
    out = tmp_path / "b.json"
    doc = run_bench(catalog, BenchOptions(ops=["ReluGrad", "TanhGrad"], sizes=["small"], backends=["openmp", "reference"],
                                          quick=True, out=out), log=lambda message: None)
    assert [r["op"] for r in doc["results"]] == ["ReluGrad", "TanhGrad"]  # both measured on reference
    assert all("reference" in r["median_s"] and "openmp" not in r["median_s"] for r in doc["results"])
    assert any("ReluGrad small on openmp" in p and "SIGSEGV" in p for p in doc["problems"])
    assert json.loads(out.read_text())["problems"] == doc["problems"]


def test_a_size_with_fewer_outputs_requests_only_those(catalog, monkeypatch):
    """A bench size's `outputs` param reaches the backends (SplitTraining's node has one output per part: ORT
    rejects a 2-part split built with four)."""
    asked = []

    class Recording:
        name = "ort"

        def availability(self):
            return None

        def time(self, request, budget):
            asked.append(request.outputs)
            return [0.001] * budget["min_reps"]

        def environment(self):
            return {}

        def close(self):
            pass

    monkeypatch.setattr(runner, "create", lambda name, threads: Recording())
    doc = run_bench(catalog, BenchOptions(ops=["SplitTraining"], sizes=["small"], backends=["ort"], quick=True),
                    log=lambda message: None)
    assert not doc["problems"]
    assert set(asked) == {(True, True, False, False)}


def test_a_dtype_casts_the_float_inputs_and_scales_their_bytes(catalog):
    logs = []
    doc = run_bench(catalog, BenchOptions(ops=["GatherGrad", "LayerNormalizationGrad", "GRUGrad"], sizes=["small"],
                                          backends=["openmp"], quick=True, dtypes=["float32", "float16"]), log=logs.append)
    rows = {(r["op"], r["dtype"]): r for r in doc["results"]}
    assert list(rows) == [("GRUGrad", "float32"), ("GatherGrad", "float32"), ("GatherGrad", "float16"),
                          ("LayerNormalizationGrad", "float32"), ("LayerNormalizationGrad", "float16")]
    assert any("GRUGrad small: its spec has no float16, skipped" in m for m in logs)
    # openmp took every row's inputs: LayerNormalizationGrad's statistics stayed float32 (float16 ones are refused)
    assert doc["problems"] == [] and all("openmp" in r["median_s"] for r in rows.values())
    # GatherGrad small: a 1000 x 64 table written, 512 rows of 64 read, and 512 int64 indices, whatever the float type
    assert rows[("GatherGrad", "float32")]["bytes"] == (1000 * 64 + 512 * 64) * 4 + 512 * 8
    assert rows[("GatherGrad", "float16")]["bytes"] == (1000 * 64 + 512 * 64) * 2 + 512 * 8
    assert rows[("LayerNormalizationGrad", "float16")]["bytes"] * 2 == rows[("LayerNormalizationGrad", "float32")]["bytes"]
    assert "float16" in table(doc)


def test_inputs_take_the_dtype_the_spec_binds_them_to(catalog):

    spec = catalog.by_op("LayerNormalizationGrad")
    (w,) = workloads(catalog, ops=[spec.op], sizes=["small"])
    cast = runner.cast_inputs(spec, w.inputs(), "float16")
    assert [a.dtype.name for a in cast] == ["float16", "float16", "float16", "float32", "float32"]
    spec = catalog.by_op("GatherGrad")
    (w,) = workloads(catalog, ops=[spec.op], sizes=["small"])
    assert [a.dtype.name for a in runner.cast_inputs(spec, w.inputs(), "bfloat16")] == [
        "int64", "int64", "bfloat16"]


def test_a_peer_refusing_a_dtype_is_a_problem_of_its_row(catalog):
    def refusing(inputs):
        def call():
            raise RuntimeError("expected scalar type Float but found Half")
        return call

    (w,) = workloads(catalog, ops=["ReluGrad"], sizes=["small"])
    problems = []
    peer = runner._torch_peer(dataclasses.replace(w, torch=refusing), [], "ReluGrad small float16", problems,
                              lambda message: None)
    assert peer is None
    assert problems == ["ReluGrad small float16 on torch: RuntimeError: expected scalar type Float but found Half"]


def test_bad_selection_is_a_usage_error(catalog, capsys):
    with pytest.raises(BenchError, match="no benchmark matches"):
        select(BenchOptions(ops=["NoSuchGrad"]), catalog)
    assert main(["bench", "--ops", "NoSuchGrad", "--quick"]) == 2
    assert "no benchmark matches" in capsys.readouterr().err
    assert main(["bench", "--backends", "openmp,nope", "--quick", "--sizes", "small"]) == 2
    assert main(["bench", "--dtype", "float8", "--quick", "--sizes", "small"]) == 2
    assert "--dtype float8: use float32, float64, float16, bfloat16" in capsys.readouterr().err


def test_backends_interleave_in_rounds(catalog, monkeypatch):
    calls = []

    class Recording:
        def __init__(self, name, seconds):
            self.name, self.seconds = name, seconds

        def availability(self):
            return None

        def time(self, request, budget):
            calls.append((self.name, budget["warmup"]))
            return [self.seconds] * budget["min_reps"]

        def environment(self):
            return {}

        def close(self):
            pass

    monkeypatch.setattr(runner, "create", lambda name, threads: Recording(name, {"openmp": 0.001, "ort": 0.004}[name]))
    doc = run_bench(catalog, BenchOptions(ops=["ReluGrad"], sizes=["small"], backends=["openmp", "ort"]),
                    log=lambda message: None)
    assert calls == [("openmp", 3), ("ort", 3), ("openmp", 1), ("ort", 1), ("openmp", 1), ("ort", 1)]
    row = doc["results"][0]
    assert row["median_s"] == {"openmp": 0.001, "ort": 0.004}  # the rounds' samples pooled


def test_each_isa_level_is_measured_and_named(tmp_path, capsys):
    """--isa runs every level in one command, openmp forced to it and torch told the same level."""
    from harness.backends import openmp_lib

    levels = openmp_lib.available_isa_levels()
    out = tmp_path / "bench.json"
    code = main(["bench", "--quick", "--sizes", "small", "--ops", "ReluGrad", "--backends", "openmp",
                 "--isa", ",".join(levels), "--out", str(out)])
    assert code == 0
    doc = json.loads(out.read_text())
    if len(levels) > 1:
        assert [e["isa"] for e in doc["isa_levels"]] == levels
        assert [e["isa_kernels"] for e in doc["isa_levels"]] == levels  # what the loaded library says it is
        assert [e["isa_forced_torch"] for e in doc["isa_levels"]] == [runner.ATEN_CAPABILITY[v] for v in levels]
        assert [e["torch_isa_env"] for e in doc["isa_levels"]] == [runner.torch_isa_env_text(v) for v in levels]
        # the kernels' OpenBLAS at the level too, not the CPU's widest core (SkylakeX ran at avx2 before)
        cores = {e["isa"]: e["kernels BLAS core"] for e in doc["isa_levels"]}
        assert all(runner.blas_core_problem(v, cores[v], "openmp") is None for v in levels), cores
        assert cores.get("avx2", "Haswell") == "Haswell" and cores.get("avx512", "SkylakeX") == "SkylakeX", cores
        assert not doc["problems"]
    assert [r["isa"] for r in doc["results"]] == levels
    printed = capsys.readouterr().out
    assert all(f"ReluGrad             small       float32  {level}" in printed for level in levels)


@pytest.mark.parametrize("level, expected", [("avx2", "Intel AVX2"), ("baseline", "Intel SSE4.1")])
def test_torch_libraries_are_held_to_the_level(level, expected):
    """oneDNN (torch's LSTM, GRU and convolutions) and MKL (its matrix products) ignore ATEN_CPU_CAPABILITY:
    the bench's environment for a level must cap them too, or an avx2 row compares with AVX-512 code."""
    pytest.importorskip("torch")
    from harness.backends import openmp_lib

    if "avx2" not in openmp_lib.available_isa_levels():
        pytest.skip("this CPU has no AVX2: nothing above the level to cap")
    code = "import torch; torch.nn.LSTM(4, 4)(torch.zeros(2, 1, 4)); a = torch.ones(8, 8); a @ a"
    env = {**os.environ, **runner.TORCH_ISA_ENV[level], "ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120).stdout
    onednn = re.search(r"onednn_verbose,.*,cpu,isa:(.*)", out)
    assert onednn and onednn.group(1).strip() == expected, out[:2000]
    mkl = re.search(r"MKL_VERBOSE oneMKL.*? for (.*?) enabled processors", out)
    mkl_name = {"avx2": "(Intel(R) AVX2)", "baseline": "(Intel(R) SSE4.2)"}[level]
    assert mkl is None or mkl_name in mkl.group(1), mkl.group(0)  # a torch without MKL has nothing to cap


WARM_PROBE = """
import resource, numpy as np
from harness.bench.allocator import warm_allocator
def faults_of_second(n):  # minor page faults of an allocation of n bytes made after one was freed
    a = np.ones(n, np.uint8); del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(n, np.uint8)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
with warm_allocator() as what:
    warm = faults_of_second(64 << 20)
cold = faults_of_second(64 << 20)  # the thresholds restored
print(what.startswith("glibc"), warm, cold)
"""


def test_in_process_peers_reuse_memory_instead_of_faulting_it_in():
    """torch allocates its outputs per call: without the warm allocator each call of a large op paid its
    page faults (most of torch's BatchNormalizationGrad time), so /torch depended on glibc's mood."""
    out = subprocess.run([sys.executable, "-c", WARM_PROBE], capture_output=True, text=True, timeout=60)
    glibc, warm, cold = out.stdout.split()
    if glibc != "True":
        pytest.skip("not glibc: the allocator is left as it is (the bench records that)")
    assert int(warm) * 4 < int(cold), (warm, cold)


def test_the_bench_records_how_peers_allocate(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--sizes", "small", "--ops", "ReluGrad", "--backends", "reference",
                 "--out", str(out)]) == 0
    assert "peer_allocator" in json.loads(out.read_text())["environment"]


def test_a_level_the_cpu_lacks_is_refused_with_the_reason(monkeypatch):
    from harness.backends import openmp_lib

    monkeypatch.setattr(openmp_lib, "cpu_flags", lambda: set())
    with pytest.raises(BenchError, match="--isa: ISA level avx2 .* lacks"):
        runner.isa_levels(BenchOptions(isa=["avx2"]))
    with pytest.raises(BenchError, match="not a level"):
        runner.isa_levels(BenchOptions(isa=["sse7"]))


def _noisy_backend(times_per_round):
    """A fake backend whose rounds return the given per-call times, one list per round."""
    rounds = iter(times_per_round)

    class Fake:
        def availability(self):
            return None

        def time(self, request, budget):
            return list(next(rounds))

        def environment(self):
            return {}

        def close(self):
            pass

    return Fake()


@pytest.mark.parametrize("rounds, warned", [
    ([[1.0e-3] * 4, [1.0e-3] * 4, [1.0e-3] * 4], False),    # three rounds agreeing exactly
    ([[1.0e-3] * 4, [1.05e-3] * 4, [1.0e-3] * 4], False),   # 5 %: within the 10 % bound
    ([[1.0e-3] * 4, [1.3e-3] * 4, [1.0e-3] * 4], True),     # one round 30 % slower: the machine got busy
    ([[1.0e-3, 1.0e-3, 2e-3, 2e-3]] * 3, True),             # calls within each round spread by 2x
])
def test_a_figure_whose_repeated_runs_disagree_is_flagged(catalog, monkeypatch, rounds, warned):
    monkeypatch.setattr(runner, "create", lambda name, threads: _noisy_backend(rounds))
    doc = run_bench(catalog, BenchOptions(ops=["ReluGrad"], sizes=["small"], backends=["openmp"]),
                    log=lambda message: None)
    printed = table(doc)
    row = doc["results"][0]
    noise = runner._noise(row, "openmp")
    assert f"±{noise:4.0%}" in printed  # each figure with its spread
    assert ("warning: ReluGrad small float32" in printed) is warned
    assert (noise > runner.NOISY) is warned


def test_the_header_names_threads_and_load(monkeypatch):
    monkeypatch.setattr(runner.os, "getloadavg", lambda: (1.75, 0.0, 0.0))
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 2)
    line = runner.header(BenchOptions(threads=1, quick=True))
    assert line.startswith("bench: 1 thread(s) on 2 CPU(s), 1-minute load average 1.75")
    assert "busy" in line and "rough figures" in line  # 1.75 + 1 thread > 2 CPUs
    monkeypatch.setattr(runner.os, "getloadavg", lambda: (0.2, 0.0, 0.0))
    assert "busy" not in runner.header(BenchOptions(threads=1))
