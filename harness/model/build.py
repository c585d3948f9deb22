"""A forward model's training graph, built with onnxruntime-training's own artifact generation, as a user would.

`python -m harness.model.build MODEL OUTDIR LOSS FROZEN_JSON` runs `onnxruntime.training.artifacts.generate_artifacts`
in a child process (the builder aborts on some graphs) with every float initializer trainable except the frozen
ones: the running statistics BatchNormalization reads (its inputs 3 and 4) and the names matching --frozen globs.
"""
from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
from pathlib import Path

from harness.backends.ort_autograd import short_message

LOSSES = {"mse": "MSELoss", "crossentropy": "CrossEntropyLoss", "bce": "BCEWithLogitsLoss", "l1": "L1Loss"}
NEEDS_TORCH = ("opconform model on a forward model builds its training graph with onnxruntime.training.artifacts, "
               "which needs torch: pip install 'opconform[torch]' (or give a training_model.onnx or an artifacts "
               "directory)")


class BuildError(Exception):
    """The builder refused the model: a finding of the model, with ORT's message."""


def parameters(model, frozen_globs: list[str]) -> tuple[list[str], list[str]]:
    """(trainable, frozen) float initializers."""
    from onnx import TensorProto

    floats = [t.name for t in model.graph.initializer
              if t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16)]
    statistics = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization"
                  for i in (3, 4) if i < len(n.input)}
    frozen = [n for n in floats if n in statistics or any(fnmatch.fnmatchcase(n, g) for g in frozen_globs)]
    return [n for n in floats if n not in frozen], frozen


def main(model_path: str, out_dir: str, loss: str, frozen_json: str) -> int:
    import onnx
    from onnxruntime.training import artifacts

    model = onnx.load(model_path)
    trainable, frozen = parameters(model, json.loads(frozen_json))
    if not trainable:
        print("the model has no float initializer to train (its parameters are inputs or constants)", file=sys.stderr)
        return 3
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    try:
        artifacts.generate_artifacts(model, requires_grad=trainable, frozen_params=frozen,
                                     loss=getattr(artifacts.LossType, LOSSES[loss]), optimizer=artifacts.OptimType.AdamW,
                                     artifact_directory=out_dir)
    except Exception as e:  # noqa: BLE001 - the builder's refusal is the finding; its first line names it
        print(f"onnxruntime-training's builder refused the model: {short(str(e))}", file=sys.stderr)
        return 4
    return 0


def short(message: str) -> str:
    return short_message(message)


def build(model_path: Path, out_dir: Path, loss: str, frozen: list[str], timeout: float) -> Path:
    """OUT_DIR/training_model.onnx, or BuildError naming why not."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise BuildError(NEEDS_TORCH)
    try:
        done = subprocess.run([sys.executable, "-m", "harness.model.build", str(model_path), str(out_dir), loss,
                               json.dumps(frozen)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildError(f"generate_artifacts took more than {timeout:g} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip() and not line.startswith(" ")]
        if done.returncode < 0:
            raise BuildError(f"onnxruntime-training's builder crashed on the model (signal {-done.returncode})")
        mine = [line for line in lines if "refused the model" in line or "no float initializer" in line]
        raise BuildError((mine or lines or [f"generate_artifacts failed (exit {done.returncode})"])[-1])
    return out_dir / "training_model.onnx"


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
