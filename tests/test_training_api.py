"""What the training artifacts run is what the specs check: a small MLP exported from torch, artifacts from
onnxruntime.training.artifacts.generate_artifacts (AdamW, MSELoss), and three real optimizer steps through
onnxruntime.training.api (CheckpointState, Module, Optimizer). Each step's parameters must be what
reference.ops.adamw computes from the parameters before the step and the gradients the module accumulated, with
the attributes the artifacts' AdamWOptimizer node carries (read from optimizer_model.onnx), the moments carried by
the reference's own float64 trajectory from zero, and step = the number of completed steps + 1."""
import contextlib
import io

import numpy as np
import onnx
import pytest

from reference.ops.adamw import adamw

torch = pytest.importorskip("torch")
LR = 0.05


def close(got, want, step) -> bool:
    """float32 steps against the float64 trajectory: ORT's moments and bias corrections are float32, so each step's
    update errs by ~1e-6 of its size (lr); the errors add up over the steps."""
    return np.allclose(got, want, rtol=2e-6, atol=1e-5 * LR * step)


def _artifacts(directory):
    from onnxruntime.training import artifacts

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    path = directory / "mlp.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model, (torch.randn(5, 4),), str(path), dynamo=False, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
        loaded = onnx.load(str(path))
        params = [i.name for i in loaded.graph.initializer]
        (directory / "artifacts").mkdir()
        artifacts.generate_artifacts(loaded, requires_grad=params, frozen_params=[], loss=artifacts.LossType.MSELoss,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=str(directory / "artifacts"))
    return directory / "artifacts", params


def _adamw_attributes(optimizer_model):
    node = next(n for n in onnx.load(str(optimizer_model)).graph.node if n.op_type == "AdamWOptimizer")
    attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    # ORT reads the float attributes as float32 (alpha 0.9 is 0.899999976...): the reference gets the same numbers
    return {k: float(np.float32(v)) if isinstance(v, float) else int(v) for k, v in attributes.items()}


def test_three_training_api_steps_follow_the_adamw_reference(tmp_path):
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    directory, names = _artifacts(tmp_path)
    attributes = _adamw_attributes(directory / "optimizer_model.onnx")
    assert {"alpha", "beta", "epsilon", "weight_decay"} <= set(attributes)
    state = CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    module = Module(str(directory / "training_model.onnx"), state, str(directory / "eval_model.onnx"))
    optimizer = Optimizer(str(directory / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    module.train()
    rng = np.random.default_rng(0)
    m1 = m2 = None
    for step in range(1, 4):
        before = [state.parameters[n].data.copy() for n in names]
        x, target = rng.standard_normal((5, 4)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
        module(x, target)
        grads = [state.parameters[n].grad.copy() for n in names]
        assert any(np.abs(g).max() > 0 for g in grads)
        optimizer.step()
        module.lazy_reset_grad()
        after = [state.parameters[n].data.copy() for n in names]
        m1 = m1 or [np.zeros(w.shape) for w in before]
        m2 = m2 or [np.zeros(w.shape) for w in before]
        flag, want, m1, m2 = adamw(np.float32(LR), np.int64(step), before, grads, m1, m2, **attributes)
        assert bool(np.asarray(flag).reshape(-1)[0])
        for name, got, expected, old in zip(names, after, want, before):
            assert not np.array_equal(got, old), name  # the step moved every parameter
            assert close(got, expected, step), (name, step, np.abs(got - expected).max())


def test_the_comparison_fails_for_a_wrong_mode_or_step(tmp_path):
    """The agreement above would not hold for the other adam_mode or a step counted from 0 (bias correction off)."""
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    directory, names = _artifacts(tmp_path)
    attributes = _adamw_attributes(directory / "optimizer_model.onnx")
    state = CheckpointState.load_checkpoint(str(directory / "checkpoint"))
    module = Module(str(directory / "training_model.onnx"), state, str(directory / "eval_model.onnx"))
    optimizer = Optimizer(str(directory / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    module.train()
    before = [state.parameters[n].data.copy() for n in names]
    module(np.ones((5, 4), np.float32), np.zeros((5, 3), np.float32))
    grads = [state.parameters[n].grad.copy() for n in names]
    optimizer.step()
    after = [state.parameters[n].data.copy() for n in names]
    zeros = [np.zeros(w.shape) for w in before]
    other_mode = {**attributes, "adam_mode": 1 - attributes.get("adam_mode", 0)}
    for wrong in (adamw(np.float32(LR), np.int64(1), before, grads, zeros, zeros, **other_mode)[1],
                  adamw(np.float32(LR), np.int64(2), before, grads, zeros, zeros, **attributes)[1]):
        assert not all(close(g, w, 1) for g, w in zip(after, wrong))
