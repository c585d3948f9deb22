"""The part of the `ort-autograd` backend that runs inside the isolated worker: ORT's gradient builder,
and sessions of the graphs it builds, cached per forward model (op, attributes, shapes, dtypes)."""
from __future__ import annotations

import hashlib
from collections import OrderedDict

from harness.backends import ort_session
from harness.backends.ort_session import OrtError

CACHED = 64  # built graphs kept; a run visits each (op, attributes, shapes, dtype) in a row
_graphs: OrderedDict[tuple, tuple] = OrderedDict()


def handle(request: dict):
    ort_session._keep_torch_out()
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # the builder logs every graph pass at INFO to stderr
    if request["call"] == "info":
        info = ort_session.info()
        info["builder"] = info["training"]
        return info
    if request["call"] == "run":
        return run(request)
    raise ValueError(f"ort-autograd worker: unknown call {request['call']!r}")


def run(request: dict) -> dict:
    session, nodes = _graph(request)
    try:
        outputs = session.run(request["fetches"], request["feeds"])
    except Exception as e:  # noqa: BLE001 - any ORT error is the op's result, sent back as OrtError
        raise OrtError(f"run|{type(e).__name__}|{e}") from None
    return {"outputs": outputs, "nodes": nodes}


def _graph(request: dict) -> tuple:
    # the starts' shapes too: the graph declares `<Y>_grad` with them, and one forward model (Reshape's shape
    # fed as an input) gives outputs of different shapes
    key = (hashlib.sha256(request["model"]).hexdigest(), tuple(request["wrt"]), repr(sorted(request["starts"].items())),
           request["threads"], request["provider"])
    if key in _graphs:
        _graphs.move_to_end(key)
        return _graphs[key]
    import onnx
    import onnxruntime as ort
    from onnxruntime.capi._pybind_state import GradientGraphBuilder

    try:
        builder = GradientGraphBuilder(request["model"], set(request["starts"]), set(request["wrt"]), "opconform_loss")
        builder.build()
        model = onnx.load_from_string(builder.get_model())
    except Exception as e:  # noqa: BLE001 - any ORT error is the op's result, sent back as OrtError
        raise OrtError(f"build|{type(e).__name__}|{e}") from None
    # The builder leaves `<Y>_grad` of the outputs it started from unproduced: they become the graph's inputs.
    for y, (elem_type, shape) in request["starts"].items():
        model.graph.input.append(onnx.helper.make_tensor_value_info(f"{y}_grad", elem_type, shape))
    nodes = gradient_nodes(model.graph, request["fetches"])
    session = ort_session._session(ort, {**request, "model": model.SerializeToString()},
                                   ort_session._options(ort, request))
    _graphs[key] = (session, nodes)
    if len(_graphs) > CACHED:
        _graphs.popitem(last=False)
    return session, nodes


def gradient_nodes(graph, fetches: list[str]) -> list[str]:
    """The nodes that compute `fetches` from the forward op's output gradients, in graph order, each as
    `domain.Op(attr=value, ...)`."""
    from onnx import helper

    producer = {out: node for node in graph.node for out in node.output}
    forward = next(n for n in graph.node if n.name == "forward")
    wanted, stack = set(), list(fetches)
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in wanted or node is forward:
            continue
        wanted.add(id(node))
        stack.extend(node.input)
    described = []
    for node in graph.node:
        if id(node) in wanted:
            attrs = ", ".join(f"{a.name}={_value(helper.get_attribute_value(a))}" for a in node.attribute)
            described.append(f"{node.domain + '.' if node.domain else ''}{node.op_type}({attrs})")
    return described


def _value(value):
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return "[" + ", ".join(str(_value(v)) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:.9g}"
    return value
