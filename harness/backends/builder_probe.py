"""The part of `opconform inventory`'s builder table that runs inside an isolated worker: asks
onnxruntime-training's GradientGraphBuilder (or `generate_artifacts`) for the gradient of a one-node
forward model, and says what it answered. A crash or hang of ORT kills this worker only
(harness.backends.worker): the parent records it as the probe's result and goes on.

Two entry points, one per worker: `handle` keeps torch out (the builder needs none, and importing
it costs seconds), `handle_artifacts` lets onnxruntime.training.artifacts import it (it needs torch).
"""
from __future__ import annotations

import os
import tempfile

from harness.backends import ort_session


def preload() -> None:
    ort_session.preload()


def handle(request: dict) -> dict:
    ort_session._keep_torch_out()
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # the builder logs every graph pass at INFO to stderr
    if request["call"] == "info":
        return {"version": onnxruntime.__version__}
    if request["call"] == "build":
        return build(request)
    raise ValueError(f"builder probe worker: unknown call {request['call']!r}")


def handle_artifacts(request: dict) -> dict:
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    if request["call"] == "info":
        return {"version": onnxruntime.__version__}
    if request["call"] == "artifacts":
        return artifacts(request)
    raise ValueError(f"artifacts probe worker: unknown call {request['call']!r}")


def build(request: dict) -> dict:
    """{'ok': True, 'nodes': the gradient graph's node op types} or {'ok': False, 'message': ORT's error}."""
    import onnx
    from onnxruntime.capi._pybind_state import GradientGraphBuilder

    try:
        builder = GradientGraphBuilder(request["model"], set(request["starts"]), set(request["wrt"]), request["loss"])
        builder.build()
        model = onnx.load_from_string(builder.get_model())
    except Exception as e:  # noqa: BLE001 - any ORT error is the probe's answer
        return {"ok": False, "message": f"{type(e).__name__}: {e}"}
    forward = set(request.get("forward_nodes", ()))
    return {"ok": True, "nodes": _described(n for n in model.graph.node if n.name not in forward)}


def artifacts(request: dict) -> dict:
    """generate_artifacts on the forward model (MSE loss on its first output, no optimizer): the training
    model's gradient nodes, or ORT's error."""
    import onnx
    from onnxruntime.training import artifacts as ort_artifacts

    model = onnx.load_from_string(request["model"])
    with tempfile.TemporaryDirectory(prefix="opconform-artifacts-") as out:
        try:
            ort_artifacts.generate_artifacts(model, requires_grad=list(request["requires_grad"]),
                                             loss=ort_artifacts.LossType.MSELoss, artifact_directory=out)
            training = onnx.load(os.path.join(out, "training_model.onnx"))
        except Exception as e:  # noqa: BLE001 - any ORT error is the probe's answer
            return {"ok": False, "message": f"{type(e).__name__}: {e}"}
    return {"ok": True, "nodes": _described(training.graph.node)}


def _described(nodes) -> list[str]:
    return [f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in nodes]
