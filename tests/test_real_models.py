"""tools/real_models.py: a CNN model is exported, listed in models.json, and ORT's generate_artifacts accepts it."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[1]


def test_conv1d_exports_with_artifacts(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "tools" / "real_models.py"), str(tmp_path), "--models", "conv1d",
                           "--artifacts"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    entry = json.loads((tmp_path / "models.json").read_text())["conv1d"]
    assert entry["file"] == "conv1d.onnx" and entry["dims"] == {"batch": 2} and entry["loss"] == "mse"
    assert entry["frozen"] == ["bn1.running_mean", "bn1.running_var"]
    assert entry["artifacts"] == "ok" and entry["builder_at_default_opset"] == "ok"
    assert (tmp_path / "conv1d_artifacts" / "training_model.onnx").exists()
