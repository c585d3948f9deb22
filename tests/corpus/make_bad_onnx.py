"""Writes a mix of good and broken ONNX backend-test directories, and what run-onnx must say of each.

Good directories are exported from the ReluGrad and TanhGrad specs (reference outputs); every broken
one starts as a copy of a good one with one thing wrong. tests/test_bad_onnx_corpus.py runs them all
in one `run-onnx` and checks that every good directory is judged and every broken one is that
case's ERROR line, saying what is wrong.

    python tests/corpus/make_bad_onnx.py OUT    # write the directories and OUT/expected.json
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

GOOD = ("ReluGrad", "TanhGrad")


def _tensor(path: Path) -> np.ndarray:
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(t)


def _write(path: Path, array: np.ndarray) -> None:
    path.write_bytes(numpy_helper.from_array(array).SerializeToString())


def _edit_model(directory: Path, change) -> None:
    model = onnx.load(str(directory / "model.onnx"))
    change(model)
    onnx.save(model, str(directory / "model.onnx"))


def broken_variants() -> dict[str, tuple]:
    """name -> (what to do to a copy of a good directory, the words its ERROR line must hold)."""
    data = "test_data_set_0"

    def truncate(d):
        raw = (d / data / "input_0.pb").read_bytes()
        (d / data / "input_0.pb").write_bytes(raw[: len(raw) // 2])

    def garbage(d):
        (d / data / "input_1.pb").write_bytes(bytes(range(7, 250, 3)) * 5)

    def extra(d):
        shutil.copy(d / data / "input_0.pb", d / data / "input_2.pb")

    def missing(d):
        (d / data / "input_1.pb").unlink()

    def as_float64(d):
        _write(d / data / "input_0.pb", _tensor(d / data / "input_0.pb").astype(np.float64))

    def reshaped(d):
        x = _tensor(d / data / "input_1.pb")  # the model declares its rank (its dims are symbolic)
        _write(d / data / "input_1.pb", x.reshape(1, *x.shape))

    def output_truncated(d):
        raw = (d / data / "output_0.pb").read_bytes()
        (d / data / "output_0.pb").write_bytes(raw[:5])

    def output_extra(d):
        shutil.copy(d / data / "output_0.pb", d / data / "output_1.pb")

    def output_as_float16(d):
        _write(d / data / "output_0.pb", _tensor(d / data / "output_0.pb").astype(np.float16))

    def wrong_domain(d):
        _edit_model(d, lambda m: setattr(m.graph.node[0], "domain", "ai.onnx.contrib"))

    def unknown_op(d):
        _edit_model(d, lambda m: setattr(m.graph.node[0], "op_type", "ReluGradient"))

    def default_domain(d):
        _edit_model(d, lambda m: setattr(m.graph.node[0], "domain", ""))

    def corrupt_model(d):
        (d / "model.onnx").write_bytes(b"\x0a\xff\xff\xff\xff\x0f not a model")

    def no_model(d):
        (d / "model.onnx").unlink()

    def no_datasets(d):
        shutil.rmtree(d / data)

    def two_nodes(d):
        _edit_model(d, lambda m: m.graph.node.append(onnx.helper.make_node("Identity", ["dX"], ["dX2"])))

    def badly_named_input(d):
        (d / data / "input_0.pb").rename(d / data / "input_first.pb")

    return {
        "truncated_input": (truncate, ["input_0.pb", "TensorProto"]),
        "garbage_input": (garbage, ["input_1.pb", "TensorProto"]),
        "extra_input": (extra, ["input_2.pb", "no graph input"]),
        "missing_input": (missing, ["input_1.pb", "missing"]),
        "input_dtype_disagrees": (as_float64, ["input_0.pb", "float64", "float32"]),
        "input_shape_disagrees": (reshaped, ["input_1.pb", "shape"]),
        "truncated_output": (output_truncated, ["output_0.pb", "TensorProto"]),
        "extra_output": (output_extra, ["output_1.pb", "no graph output"]),
        "output_dtype_disagrees": (output_as_float16, ["output_0.pb", "float16", "float32"]),
        "wrong_domain": (wrong_domain, ["unknown domain 'ai.onnx.contrib'", "com.microsoft"]),
        # '' is ONNX's default domain (ai.onnx): a com.microsoft op there is unknown, and its domain named
        "default_domain": (default_domain, ["unknown op", "in domain '' (ai.onnx)", "is in 'com.microsoft'"]),
        "unknown_op": (unknown_op, ["unknown op 'ReluGradient' in domain 'com.microsoft'", "did you mean 'ReluGrad'"]),
        "corrupt_model": (corrupt_model, ["model.onnx does not parse"]),
        "no_model": (no_model, ["no model.onnx"]),
        "no_datasets": (no_datasets, ["no test_data_set_N"]),
        "two_nodes": (two_nodes, ["2 nodes"]),
        "badly_named_input": (badly_named_input, ["input_first.pb"]),
    }


def write_corpus(out: Path, specs: Path | None = None) -> dict:
    """The directories under out, and {"good": [...], "broken": {name: [words]}} (also out/expected.json)."""
    from harness.core.spec_loader import load_catalog
    from harness.run.onnx_data import export_cases
    from harness.run.runner import RunOptions, select_cases

    catalog = load_catalog(specs)
    cases = select_cases(catalog, RunOptions(ops=list(GOOD), tier="smoke", cases="float32-basic/*"))
    good_root = out / "_good"
    export_cases(catalog, cases, good_root)
    good = sorted(p.name for p in good_root.iterdir())
    assert len(good) >= 4, good
    for name in good:
        shutil.move(str(good_root / name), str(out / name))
    good_root.rmdir()
    broken = {}
    for index, (name, (damage, words)) in enumerate(broken_variants().items()):
        source = out / good[index % len(good)]
        target = out / f"broken_{name}"
        shutil.copytree(source, target)
        damage(target)
        broken[target.name] = words
    expected = {"good": good, "broken": broken}
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return expected


if __name__ == "__main__":
    print(json.dumps(write_corpus(Path(sys.argv[1])), indent=1))
