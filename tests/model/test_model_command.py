"""`opconform model` end to end on two small models the tests build themselves (torch export, onnxruntime-training's
generate_artifacts): a CNN (Conv, BatchNorm, Relu, MaxPool, Gemm) and a small text model (Gather embedding, MatMul,
Softmax, Gelu), as a forward model, an artifacts directory and a training graph file; the exit status and the census
rules; a planted wrong reference fails the model; a builder refusal is the model's finding, not a crash."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.fc = torch.nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        h = self.pool(torch.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(h, 1))


class Text(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.proj = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 4)

    def forward(self, ids):
        h = self.embed(ids)
        attention = torch.softmax(h @ h.transpose(1, 2), dim=-1)
        h = torch.nn.functional.gelu(self.proj(attention @ h))
        return self.out(h[:, 0])


class WithLayerNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.fc(x))


def export(module, example, path: Path, axes: dict, opset: int = 17) -> Path:
    torch.manual_seed(0)
    torch.onnx.export(module, (example,), str(path), input_names=["x"], output_names=["y"], dynamic_axes=axes,
                      dynamo=False, opset_version=opset, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    return {
        "cnn": export(Cnn(), torch.randn(2, 3, 16, 16), root / "cnn.onnx", {"x": {0: "batch"}, "y": {0: "batch"}}),
        "text": export(Text(), torch.zeros(2, 6, dtype=torch.long), root / "text.onnx",
                       {"x": {0: "batch", 1: "seq"}, "y": {0: "batch"}}),
        "layernorm": export(WithLayerNorm(), torch.randn(2, 8), root / "ln.onnx", {"x": {0: "batch"}, "y": {0: "batch"}}),
    }


def opconform(*args, cwd=None, path=None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, PYTHONPATH=str(path)) if path else None
    return subprocess.run([sys.executable, "-m", "harness.cli", "model", *map(str, args), "--no-progress"],
                          capture_output=True, text=True, cwd=cwd or ROOT, timeout=900, env=env)


def doc(out: Path) -> dict:
    return json.loads((out / "model.json").read_text())


@pytest.fixture(scope="module")
def cnn_run(models, tmp_path_factory):
    out = tmp_path_factory.mktemp("cnn")
    done = opconform(models["cnn"], "--dim", "batch=2", "--out", out, "--backends", "reference,openmp,ort,ort-autograd")
    return done, out


def test_cnn_forward_model_every_configuration_verified(cnn_run):
    done, out = cnn_run
    assert done.returncode == 0, done.stdout + done.stderr
    found = doc(out)
    assert found["kind"] == "forward" and found["verdict"] == "PASS"
    specs = {row["spec"]: row for row in found["configurations"]}
    assert {"ConvGrad", "BatchNormalizationGrad", "ReluGrad", "MaxPoolGrad", "GemmGradient"} <= set(specs)
    assert all(row["status"] == "verified" for row in found["configurations"]), \
        [(r["spec"], r["status"], r["reason"]) for r in found["configurations"]]
    conv = specs["ConvGrad"]
    # the real configuration: X [2, 3, 16, 16] (the batch as --dim says), stride 2, the input needs no gradient
    assert conv["shapes"]["X"] == [2, 3, 16, 16] and conv["attributes"]["strides"] == [2, 2]
    assert conv["outputs"] == ["dW", "dB"]
    # the symbolic batch of the graph goes to ort-autograd as a dynamic axis
    assert conv["dynamic_axes"] == {"X": {"0": "batch"}} and conv["export"] == {"dynamic_axes": {"X": {"0": "batch"}}}
    assert set(conv["backends"]) == {"reference", "openmp", "ort", "ort-autograd"}
    assert set(conv["backends"].values()) == {"pass"}
    # the gradient accumulators of the artifacts are configurations of their own spec now: every node is covered
    assert specs["InPlaceAccumulatorV2"]["status"] == "verified"
    assert found["uncovered"] == [] and found["totals"]["nodes_uncovered"] == 0
    assert "model verdict: PASS" in done.stdout


def test_artifacts_directory_and_training_graph_file_give_the_same_census(cnn_run, tmp_path):
    _, out = cnn_run
    first = doc(out)
    for path in (out / "training", out / "training" / "training_model.onnx"):
        again = tmp_path / path.name
        done = opconform(path, "--dim", "batch=2", "--out", again, "--no-run")
        assert done.returncode == 0, done.stderr
        found = doc(again)
        assert found["kind"] == ("artifacts" if path.is_dir() else "training_graph")
        assert [(r["spec"], r["shapes"], r["attributes"]) for r in found["configurations"]] == \
               [(r["spec"], r["shapes"], r["attributes"]) for r in first["configurations"]]


def test_text_model_scalar_gather_and_symbolic_sequence(models, tmp_path):
    out = tmp_path / "text"
    done = opconform(models["text"], "--dim", "batch=2", "--dim", "seq=6", "--out", out,
                     "--backends", "reference,openmp,ort,ort-autograd")
    found = doc(out)
    specs = {}
    for row in found["configurations"]:
        specs.setdefault(row["spec"], []).append(row)
    # ORT fuses Linear's bias into the Gelu (BiasGelu) before differentiating: its gradient is BiasGeluGrad_dX
    assert {"GatherGrad", "SoftmaxGrad_13", "MatMulGradient", "BiasGeluGrad_dX"} <= set(specs), sorted(specs)
    embedding = next(r for r in specs["GatherGrad"] if r["shapes"]["indices"] == [2, 6])
    assert embedding["dynamic_axes"]["indices"] == {"0": "batch", "1": "seq"}
    failed = [(r["spec"], r["reason"]) for r in found["configurations"] if r["status"] == "failed"]
    assert done.returncode == (1 if failed else 0), done.stdout + done.stderr


def test_missing_dimension_is_a_usage_error(models, tmp_path):
    done = opconform(models["text"], "--dim", "batch=2", "--out", tmp_path / "o", "--no-run")
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert "seq" in line and "--dim" in line


def test_bad_dim_and_missing_path(tmp_path):
    assert opconform(tmp_path / "none.onnx").returncode == 2
    done = opconform(tmp_path, "--dim", "batch")
    assert done.returncode == 2 and "training_model.onnx" in done.stderr or "NAME=SIZE" in done.stderr


def test_builder_refusal_is_the_models_finding(models, tmp_path):
    out = tmp_path / "ln"
    done = opconform(models["layernorm"], "--dim", "batch=2", "--out", out)
    assert done.returncode == 1
    found = doc(out)
    assert found["verdict"] == "FAIL" and "builder refused the model" in found["error"]
    assert "OutputDefs" in found["error"]  # ORT's own words: LayerNormalization written with only Y
    assert "Traceback" not in done.stdout + done.stderr


def test_a_wrong_reference_fails_the_model(models, tmp_path):
    """Only ReluGrad has a spec here, and its reference is wrong: the configuration fails, the command exits 1."""
    team = tmp_path / "specs"
    (team / "com.microsoft").mkdir(parents=True)
    text = (ROOT / "specs/com.microsoft/ReluGrad.yaml").read_text()
    assert 'reference: "reference.ops.activations:relu_grad"' in text
    (team / "com.microsoft/ReluGrad.yaml").write_text(
        text.replace('reference: "reference.ops.activations:relu_grad"', 'reference: "team_hooks:half_relu_grad"'))
    (team / "team_hooks.py").write_text("def half_relu_grad(dY, X):\n    return 0.5 * dY * (X > 0)\n")
    shutil.copytree(ROOT / "specs/_defaults", team / "_defaults")
    (team / "_defaults" / "hooks.yaml").write_text("packages: [team_hooks]\n")
    out = tmp_path / "run"
    done = opconform(models["cnn"], "--dim", "batch=2", "--out", out, "--no-builtin-specs", "--specs", team,
                     "--backends", "reference,openmp", path=team)
    assert done.returncode == 1, done.stdout + done.stderr
    found = doc(out)
    relu = [r for r in found["configurations"] if r["spec"] == "ReluGrad"]
    assert relu and all(r["status"] == "failed" for r in relu)
    assert all(r["rerun"] and "--ops ReluGrad" in r["rerun"] for r in relu)
    assert any(u["op"] == "ConvGrad" for u in found["uncovered"])  # no spec loaded for it: uncovered, not verified


def test_emit_cases_writes_groups_that_load_and_rebuild(cnn_run, tmp_path):
    _, out = cnn_run
    emitted = tmp_path / "team"
    done = opconform(out / "training", "--dim", "batch=2", "--out", tmp_path / "o", "--no-run", "--emit-cases", emitted,
                     "--name", "tiny cnn")
    assert done.returncode == 0, done.stderr
    conv = emitted / "com.microsoft" / "ConvGrad.overlay.yaml"
    assert conv.is_file()
    import yaml

    body = yaml.safe_load(conv.read_text())
    assert body["extends"] == "ConvGrad" and body["groups"][0]["name"] == "tiny_cnn_001"
    assert "tiny cnn" in body["groups"][0]["description"]
    # the emitted groups load as a team's overlay and run
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--specs", str(emitted), "--ops", "ConvGrad",
                          "--cases", "tiny_cnn_*", "--backends", "reference", "--tier", "nightly", "--out",
                          str(tmp_path / "r"), "--no-report", "--no-progress"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0 and "verdict: PASS" in run.stdout, run.stdout + run.stderr
    # emitting again replaces the model's groups instead of adding copies
    opconform(out / "training", "--dim", "batch=2", "--out", tmp_path / "o2", "--no-run", "--emit-cases", emitted,
              "--name", "tiny cnn")
    assert len(yaml.safe_load(conv.read_text())["groups"]) == len(body["groups"])
