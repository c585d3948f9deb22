"""The dependency set works together: the installed onnx is inside pyproject's pin, and every kind of model
the project writes loads into onnxruntime-training 1.19.2 (which loads IR version 10 at most).

Kinds: the ort backend's one-node kernel models, the ort-autograd training graphs (ORT's gradient builder
run on opconform's forward models), export-onnx's model.onnx, and, where torch is installed, the training,
eval and optimizer models `onnxruntime.training.artifacts.generate_artifacts` writes (onnx >= 1.18 makes it
write an optimizer model of IR 11+, which 1.19.2 refuses). Sessions are created in a subprocess, so that a
crash at session creation is a failed test, not a dead pytest.
"""
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
MAX_IR_VERSION = 10  # onnxruntime-training 1.19.2: "Unsupported model IR version: 11, max supported IR version: 10"


def onnx_pin() -> Requirement:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (pin,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "onnx"]
    return pin


def test_the_pin_admits_the_releases_ort_1_19_2_loads_and_no_later():
    pin = onnx_pin()
    assert "1.16.0" in pin.specifier and "1.17.0" in pin.specifier
    assert "1.18.0" not in pin.specifier and "1.23.2" not in pin.specifier
    assert "1.15.0" not in pin.specifier


def test_the_installed_onnx_is_inside_the_pin():
    import onnx

    installed = importlib.metadata.version("onnx")
    assert installed == onnx.__version__
    assert Version(installed) in onnx_pin().specifier, f"onnx {installed} is outside the pin {onnx_pin()}"


def _run(script: str, tmp_path: Path, timeout: float = 600) -> list[dict]:
    """Run the script in a fresh interpreter from the repository; it prints one JSON object per model."""
    path = tmp_path / "load_models.py"
    path.write_text(textwrap.dedent(script))
    done = subprocess.run([sys.executable, str(path), str(tmp_path)], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


HARNESS_MODELS = """
    import json, sys
    from pathlib import Path

    import onnx
    import onnxruntime as ort
    from onnxruntime.capi._pybind_state import GradientGraphBuilder

    from harness.backends import onnx_model, ort_autograd
    from harness.backends.base import Unsupported
    from harness.core.cases import expand
    from harness.core.spec_loader import load_catalog
    from harness.run.engine import prepare
    from harness.run.onnx_data import export_case
    from harness.run.probe import probe_request

    out = Path(sys.argv[1])
    catalog = load_catalog("specs")
    options = ort.SessionOptions()
    options.log_severity_level = 4

    def report(kind, name, model_bytes):
        model = onnx.load_from_string(model_bytes)
        record = {"kind": kind, "name": name, "ir_version": model.ir_version,
                  "opsets": {o.domain: o.version for o in model.opset_import}}
        try:
            ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
            record["loaded"] = True
        except Exception as e:
            record["loaded"], record["error"] = False, f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(record), flush=True)

    for spec in catalog.specs:  # the ort backend's one-node model of each kernel op, as its probe builds it
        if spec.subject == "kernel":
            report("kernel", spec.op, onnx_model.build(probe_request(spec, "float32")).model)

    # the forward graphs ort-autograd builds, training-graph specs (MulGradient, ReduceMeanGradient) included
    for op in ("ReluGrad", "SoftmaxGrad_13", "ConvGrad", "MaxPoolGrad", "LayerNormalizationGrad", "MulGradient",
               "ReduceMeanGradient"):
        graph = ort_autograd.build(probe_request(catalog.by_op(op), "float32"))
        assert not isinstance(graph, Unsupported), (op, graph)
        builder = GradientGraphBuilder(graph.model, set(graph.starts), set(graph.wrt), "opconform_loss")
        builder.build()
        model = onnx.load_from_string(builder.get_model())
        for y, (elem_type, shape) in graph.starts.items():  # as harness.backends.ort_autograd_session does
            model.graph.input.append(onnx.helper.make_tensor_value_info(f"{y}_grad", elem_type, shape))
        report("training_graph", op, model.SerializeToString())

    for op in ("ReluGrad", "MaxPoolGrad", "GatherGrad"):
        case = next(c for c in expand(catalog.by_op(op), "smoke") if c.valid and c.dtype == "float32")
        directory = out / "export" / op
        export_case(prepare(case), directory)
        report("export", op, (directory / "model.onnx").read_bytes())
"""


def test_every_model_the_harness_writes_loads_into_ort(tmp_path):
    pytest.importorskip("onnxruntime.capi._pybind_state")
    records = _run(HARNESS_MODELS, tmp_path)
    kinds = {r["kind"] for r in records}
    assert kinds == {"kernel", "training_graph", "export"}
    assert len([r for r in records if r["kind"] == "kernel"]) >= 27
    for record in records:
        assert record["ir_version"] <= MAX_IR_VERSION, record
        assert record["opsets"].get("", 0) <= 21, record  # 1.19.2 knows ai.onnx up to opset 21
        assert record["loaded"], record


ARTIFACTS = """
    import json, sys
    from pathlib import Path

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    out = Path(sys.argv[1]) / "artifacts"
    out.mkdir()
    # Y = Relu(X @ W): one trainable initializer, a loss on Y
    W = numpy_helper.from_array(np.full((3, 2), 0.5, np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["XW"]), helper.make_node("Relu", ["XW"], ["Y"])], "tiny",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 2])], [W])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])
    artifacts.generate_artifacts(model, requires_grad=["W"], loss=artifacts.LossType.MSELoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=str(out))
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        written = onnx.load(str(out / name))
        onnx.checker.check_model(written)
        print(json.dumps({"kind": name, "ir_version": written.ir_version}), flush=True)

    state = CheckpointState.load_checkpoint(str(out / "checkpoint"))
    module = Module(str(out / "training_model.onnx"), state, str(out / "eval_model.onnx"))
    optimizer = Optimizer(str(out / "optimizer_model.onnx"), module)
    before = module.get_contiguous_parameters().numpy().copy()
    module.train()
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    loss = module(x, np.zeros((4, 2), np.float32))
    optimizer.step()
    module.lazy_reset_grad()
    after = module.get_contiguous_parameters().numpy()
    print(json.dumps({"kind": "train_step", "loss": float(loss), "moved": float(np.abs(after - before).max())}))
"""


def test_generate_artifacts_output_loads_and_trains(tmp_path):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed: onnxruntime.training.artifacts needs it (pip install -e .[torch])")
    records = {r["kind"]: r for r in _run(ARTIFACTS, tmp_path)}
    for name in ("training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"):
        assert records[name]["ir_version"] <= MAX_IR_VERSION, records[name]
    step = records["train_step"]
    assert step["loss"] > 0 and step["moved"] > 0  # the training and optimizer models ran: W moved
