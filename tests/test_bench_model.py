"""`opconform bench --model`: workload lists, configurations as workloads, the per-model total, and the limit of the
memory level a workload's bytes fit in. No timing is asserted."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bench import limits, runner
from harness.bench import model as bench_model
from harness.bench.model import Entry, ModelListError, entry_workload, load_list, parse_list, per_model_totals
from harness.cli import main
from harness.core.bench_spec import bench_case, cost
from harness.core.shapes import input_shapes
from harness.model import workload_list
from harness.report import bench as report_bench

SHIPPED = ("resnet18", "mobilenet_v2", "bert_layer", "lstm_classifier")


def _doc(*configurations) -> dict:
    return {"schema": bench_model.SCHEMA, "model": "m", "configurations": list(configurations)}


GOOD = {"op": "ReluGrad", "params": {"shape": [64]}, "count": 2}


# ----------------------------------------------------------------------------------------------- the list loader


@pytest.mark.parametrize("bad, expect", [
    ({"op": "ConvGrad", "params": {}, "count": 0}, r"configuration 2 \(ConvGrad\): `count` must be a positive integer"),
    ({"op": "ConvGrad", "params": {}, "count": True}, r"configuration 2 \(ConvGrad\): `count`"),
    ({"params": {}, "count": 1}, r"configuration 2: `op` must be an op name"),
    ({"op": "ConvGrad", "params": [1], "count": 1}, r"configuration 2 \(ConvGrad\): `params` must be a mapping"),
    ({"op": "ConvGrad", "params": {}, "count": 1, "weights": []}, r"configuration 2 \(ConvGrad\): unknown field\(s\) weights"),
    ("ConvGrad", r"configuration 2: an entry is a mapping"),
])
def test_a_malformed_entry_is_one_line_naming_it(tmp_path, bad, expect):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_doc(GOOD, bad)))
    with pytest.raises(ModelListError, match=expect) as e:
        load_list(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_a_malformed_file_is_one_line(tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(ModelListError, match="not JSON"):
        load_list(path)
    with pytest.raises(ModelListError, match="non-empty list"):
        parse_list({"model": "m", "configurations": []}, "x")
    with pytest.raises(ModelListError, match="schema"):
        parse_list({**_doc(GOOD), "schema": "other/1"}, "x")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_list_loads_and_makes_workloads(catalog, name):
    listed = load_list(bench_model.shipped()[name])
    assert listed.model == name and listed.entries
    workloads = bench_model.model_workloads(catalog, listed)
    assert len(workloads) == len(listed.entries)
    keys = [json.dumps([e.op, e.params, e.inputs], sort_keys=True) for e in listed.entries]
    assert len(set(keys)) == len(keys)  # distinct configurations only
    for w in workloads:
        assert w.model == name and w.count >= 1 and w.inputs()  # inputs within the spec's contract


def test_an_entry_of_an_unknown_op_or_bad_params_names_it(catalog):
    with pytest.raises(ModelListError, match=r"configuration 1 \(NoSuchGrad\): no spec"):
        bench_model.model_workloads(catalog, parse_list(_doc({"op": "NoSuchGrad", "params": {}, "count": 1}), "l"))
    graph_spec = next(op for op in catalog.all_ops if catalog.by_op(op).subject == "training_graph")
    with pytest.raises(ModelListError, match=r"configuration 1 \(.*\): a training-graph gradient"):
        bench_model.model_workloads(catalog, parse_list(_doc({"op": graph_spec, "params": {}, "count": 1}), "l"))
    bad = parse_list(_doc({"op": "ConvGrad", "params": {"nonsense": 1}, "count": 1}), "l")
    with pytest.raises(ModelListError, match=r"configuration 1 \(ConvGrad\)"):
        bench_model.model_workloads(catalog, bad)[0].inputs()


# ----------------------------------------------------------------------------------------------- configuration -> workload


@pytest.mark.parametrize("op, size", [("ConvGrad", "small"), ("ReluGrad", "medium"), ("LayerNormalizationGrad", "small")])
def test_a_configuration_round_trips_to_its_spec_case(catalog, op, size):
    """A graph node of a bench size's case, matched as the census matches it, gives params whose workload has the same
    shapes, bytes/flops and attributes as the bench size itself."""
    from harness.model.match import match, node_of_case

    spec = catalog.by_op(op)
    case = bench_case(spec, size)
    found = match(spec, node_of_case(case))
    assert found.params is not None, found.why
    w = entry_workload(catalog, "m", 1, Entry(op, json.loads(json.dumps(found.params)), 3, inputs=found.inputs or {}))
    assert input_shapes(w.case) == input_shapes(case)
    assert w.case.node_attributes == case.node_attributes
    assert (w.bytes, w.flops) == (cost(spec, case, "bytes"), cost(spec, case, "flops"))
    assert w.count == 3 and w.size == "m/1" and (w.torch is None) == (spec.bench.torch is None)
    assert [x.shape for x in w.inputs()] == [x.shape for x in (runner.cast_inputs(spec, _inputs(spec, size), "float32"))]


def test_a_node_naming_only_its_flag_is_timed_with_the_work_it_does_in_place(catalog):
    """InPlaceAccumulatorV2 in the artifacts names only updated_flag (ORT accumulates into the buffer in place): its
    workload asks for the buffer too, else the kernel would time writing one bool. A node naming float outputs keeps
    them as they are."""
    acc = Entry("InPlaceAccumulatorV2", {"shape": [64, 3], "flag_shape": [1], "outputs": ["updated_flag"]}, 1)
    assert set(bench_model.case_of(catalog, acc).requested_outputs) == {"updated_flag", "accumulation_buffer_out"}
    split = Entry("SplitTraining", {"x": [8, 4], "sizes": [4, 4], "axis": 0, "outputs": ["output0", "output1"]}, 1)
    assert bench_model.case_of(catalog, split).requested_outputs == ("output0", "output1")


def _inputs(spec, size):
    from harness.bench.workloads import spec_workloads

    return next(w for w in spec_workloads(spec) if w.size == size).inputs()


def test_a_census_configuration_counts_its_kernel_nodes_or_layers():
    class Config:
        def __init__(self, kind, op, nodes, layers):
            self.kind, self.op, self.nodes, self.layers = kind, op, nodes, layers

    ops = {"a": "com.microsoft::ConvGrad", "b": "com.microsoft::ConvGrad", "s": "ai.onnx::Shape"}
    assert workload_list.node_count(Config("kernel", "ConvGrad", ["a", "b", "s"], []), ops) == 2  # not its helper Shape
    assert workload_list.node_count(Config("forward", "MatMul", ["x", "y", "z"], ["m1", "m2"]), {}) == 2  # its layers


# ----------------------------------------------------------------------------------------------- the per-model total


def _row(k, count, **ms):
    return {"model": "m", "isa": "avx2", "dtype": "float32", "size": f"m/{k}", "op": "X", "shape": "s", "count": count,
            "median_s": {b: v / 1e3 for b, v in ms.items()}, "gbs": {}, "gflops": {}}


def test_the_model_total_weights_each_row_by_its_count():
    rows = [_row(1, 3, openmp=1.0, ort=2.0, torch=0.5), _row(2, 1, openmp=4.0, torch=8.0), _row(3, 10, openmp=0.1, ort=0.2)]
    t = per_model_totals(rows)[("m", "avx2", "float32")]
    assert t["ms"]["openmp"] == pytest.approx(3 * 1.0 + 4.0 + 10 * 0.1)
    assert t["ms"]["ort"] == pytest.approx(3 * 2.0 + 10 * 0.2)
    assert t["ms"]["torch"] == pytest.approx(3 * 0.5 + 8.0)
    assert t["missing"] == {"openmp": [], "ort": ["m/2"], "torch": ["m/3"]} and t["nodes"] == 14
    text = bench_model.model_table({"threads": 1, "results": rows}, lambda r: "")
    assert "the gradient ops of this model's training step (m, isa avx2, float32, counts applied): openmp 8.000 ms, " \
           "ORT 8.000 ms, torch 9.500 ms" in text
    assert "ort: no time for #2" in text and "torch: no time for #3" in text
    body = [line.split()[0] for line in text.splitlines()[3:6]]
    assert body == ["2", "1", "3"]  # sorted by openmp time x count: 4.0, 3.0, 1.0 ms


# ----------------------------------------------------------------------------------------------- memory levels


def _fake_caches(root: Path, table) -> Path:
    for k, (level, kind, size) in enumerate(table):
        d = root / f"index{k}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


def test_cache_sizes_come_from_sysfs_data_and_unified_caches(tmp_path):
    root = _fake_caches(tmp_path, [(1, "Data", "32K"), (1, "Instruction", "64K"), (2, "Unified", "1024K"),
                                   (3, "Unified", "32M")])
    caches = limits.cache_sizes(root)
    assert caches == {"L1": 32 * 1024, "L2": 1024 * 1024, "L3": 32 * 1024 * 1024}
    assert limits.memory_level(4096, caches) == "L1"
    assert limits.memory_level(512 * 1024, caches) == "L2"
    assert limits.memory_level(16 * 2 ** 20, caches) == "L3"
    assert limits.memory_level(2 ** 30, caches) == "DRAM"
    assert limits.memory_level(4096, {}) == "DRAM"  # no sysfs: no cache to claim
    assert limits.level_working_sets(caches)["L1"] == 16 * 1024


def test_a_cache_sized_row_is_never_held_against_dram():
    levels = {"L1": {"bytes": 24576, "triad_gbs": 60.0}, "L2": {"bytes": 2 ** 20, "triad_gbs": 40.0},
              "DRAM": {"bytes": 3 * 2 ** 27, "triad_gbs": 10.0}}
    doc_limits = {"triad_gbs": 10.0, "levels": levels}
    l1 = {"gbs": {"openmp": 12.0}, "gflops": {}, "level": "L1"}
    assert runner.row_limit(l1, doc_limits) == (12.0, "GB/s", 60.0, "L1 triad")
    assert runner.row_limit({**l1, "level": "L3"}, doc_limits)[2] is None  # no L3 figure: no limit, never DRAM's
    assert runner.row_limit({**l1, "level": "DRAM"}, doc_limits)[2] == 10.0
    assert runner.row_limit({**l1, "triad_gbs": 30.0}, doc_limits)[2] == 30.0  # the triad on its own bytes first
    assert "( 20% of limit) L1 triad" in runner._throughput(l1, doc_limits)
    parsed = report_bench.parse({"limits": doc_limits, "results": [
        {"op": "ReluGrad", "median_s": {"openmp": 1e-6}, "bytes": 12000, "level": "L1"}]}, "b.json")
    assert parsed.rows[0].limit() == (60.0, "L1 triad")


def test_a_small_workload_gets_a_level_and_a_sane_limit(catalog, tmp_path):
    """The 48 KB ReluGrad small: the level its bytes fit in is recorded, and the triad it is held against ran at one
    thread or the bench's, the faster (a team of two threads can take milliseconds to start on a loaded machine)."""
    doc = runner.run_bench(catalog, runner.BenchOptions(ops=["ReluGrad"], sizes=["small"], backends=["openmp"],
                                                        bandwidth=True, quick=True, threads=2), log=lambda m: None)
    row = doc["results"][0]
    assert row["level"] == limits.memory_level(row["bytes"], limits.cache_sizes())
    assert row["triad_threads"] in (1, 2) and row["triad_gbs"] > 0
    assert set(doc["limits"]["levels"]) >= {"DRAM"} and "triad by memory level" in runner.table(doc)


# ----------------------------------------------------------------------------------------------- the command


def test_an_unknown_model_lists_the_shipped_ones(capsys):
    assert main(["bench", "--model", "no_such_model", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "--model no_such_model" in err and all(name in err for name in SHIPPED)


def test_a_malformed_list_file_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(_doc(GOOD, {"op": "ReluGrad", "params": {}, "count": -1})))
    assert main(["bench", "--model", str(path), "--quick", "--backends", "openmp"]) == 2
    assert "configuration 2 (ReluGrad): `count` must be a positive integer" in capsys.readouterr().err


def test_a_list_file_runs_and_prints_the_model_table(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**_doc(GOOD, {"op": "ReluGrad", "params": {"shape": [4096]}, "count": 5}),
                                "model": "mine"}))
    out = tmp_path / "b.json"
    assert main(["bench", "--model", str(path), "--quick", "--backends", "openmp", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mine at isa" in printed and "the gradient ops of this model's training step (mine," in printed
    assert "ORT 0.000 ms" in printed and "ort: no time for #1, #2" in printed
    rows = json.loads(out.read_text())["results"]
    assert [(r["model"], r["size"], r["count"]) for r in rows] == [("mine", "mine/1", 2), ("mine", "mine/2", 5)]
    assert all(r["level"] in limits.LEVELS for r in rows)
