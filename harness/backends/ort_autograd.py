"""The `ort-autograd` backend: the gradient a training graph really computes.

onnxruntime-training users never call GeluGrad; they write the forward model, and ORT's gradient
builder inserts the gradient nodes with the attributes it derives. For a case, this backend builds
the spec's forward op (its `forward:` section, at its opset, with the attributes the case writes),
asks onnxruntime-training's GradientGraphBuilder to start from the forward outputs the case gives an
incoming gradient for (fed as `<Y>_grad`, the builder's own names) and return the gradients of the
forward inputs the spec's outputs are gradients of, and runs that graph on CPU in an isolated worker. The outputs are judged
against the same reference as every backend; the gradient nodes the builder inserted come back with
them (Outputs.nodes), so a report shows which kernel the training graph really runs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from harness.backends import onnx_model
from harness.backends.base import Crashed, Outputs, Rejected, Request, Support, TimedOut, Unsupported
from harness.backends.ort import OrtBackend, classify_error
from harness.backends.worker import HandlerError
from harness.core import dtypes
from harness.spec.model import Export

LOSS = "opconform_loss"
DEFAULT_OPSETS = {"": 17, "com.microsoft": 1}


@dataclass(frozen=True)
class GradientGraph:
    """The forward model with its loss, and what to ask the builder and the session."""
    model: bytes
    feeds: dict[str, np.ndarray]
    wrt: list[str]  # forward inputs to differentiate (the builder's x node args)
    starts: dict[str, tuple[int, list[int | None]]]  # forward outputs given a gradient: (ONNX type, shape; None: unknown) of <Y>_grad
    fetches: list[str]  # their gradients, in the order of the spec outputs requested
    fetch_dtypes: list[str]
    draws: list[str]  # the forward op's random draws, fetched after the gradients


def build(request: Request) -> GradientGraph | Unsupported:
    """The forward model of a request, or why this case cannot run as a training graph."""
    spec, call = request.spec, request.forward
    if call is None or spec.forward is None:
        return Unsupported(f"{spec.op} has no forward op in its spec: nothing for a gradient builder to differentiate")
    if call.missing:
        return Unsupported(call.missing)
    forward = spec.forward
    # The forward op's random draws (Dropout's mask) are its own: built with a seed, fetched from the graph,
    # and the expected gradient is computed with them (Outputs.draws).
    values = {name: call.inputs.get(name) for name in forward.inputs if name not in forward.draws}
    if any(v is not None and dtypes.name_of(v.dtype) == "bfloat16" for v in values.values()):
        return Unsupported("bfloat16 cannot cross onnxruntime's Python API, and Cast nodes around the forward op "
                           "would put their own gradients into the graph under test")
    wrt, fetches, fetch_dtypes = [], [], []
    for out, wanted in zip(spec.outputs, request.outputs):
        if not wanted:
            continue
        if out.grad_of is None:
            return Unsupported(f"output {out.name} is not the gradient of a forward input (no grad_of)")
        if values.get(out.grad_of) is None:
            return Unsupported(f"{out.name} is the gradient of {forward.op}'s {out.grad_of}, which this case omits: "
                               "a training graph has no gradient for an absent input")
        wrt.append(out.grad_of)
        fetches.append(f"{out.grad_of}_grad")
        fetch_dtypes.append(spec.dtype_of(out, request.dtype))

    export = call.export
    constants = set(export.constants) if export is not None else set()
    graph_inputs, feeds, node_inputs, initializers = [], {}, [], []
    for name, value in values.items():
        node_inputs.append("" if value is None else name)
        if value is not None and name in constants:  # folded to a constant by the exporter
            initializers.append(numpy_helper.from_array(np.asarray(value), name))
        elif value is not None:
            graph_inputs.append(_value_info(name, value, _dims(export, name, value)))
            feeds[name] = value
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    attributes = {name: onnx_model._attribute_value(_attribute_type(spec, name), value)
                  for name, value in call.attributes.items()}
    node_outputs = [*forward.outputs, *forward.draws]  # a draw is the output of the same name (Dropout's mask)
    if forward.draws:
        attributes.setdefault("seed", call.seed % 2**31)
    if export is not None and export.outputs == "required":  # as exporters write it: the optional outputs left off
        node_outputs = ["" if name in forward.optional_outputs else name for name in node_outputs]
        while node_outputs and node_outputs[-1] == "":
            node_outputs.pop()
    nodes = [helper.make_node(forward.op, node_inputs, node_outputs, name="forward",
                              domain=forward.domain, **attributes)]

    # The incoming gradients enter as `<Y>_grad`, the names the builder gives the gradients of the forward
    # outputs it starts from, so the graph under test holds the forward node and its gradient nodes
    # only. The builder also wants a loss: a float32 sum of the first of them, never differentiated.
    seeds: dict[str, np.ndarray] = {}
    for inp, value in zip(spec.inputs, request.inputs):
        # a loaded spec gives every grad_output its grad_of (harness.core.spec_checks)
        if inp.role == "grad_output" and inp.grad_of is not None and value is not None:
            seeds[inp.grad_of] = value
            feeds[f"{inp.grad_of}_grad"] = value
    if not seeds:
        return Unsupported("the case gives no incoming gradient: nothing flows back into the forward op")
    nodes.append(helper.make_node("ReduceSum", [next(iter(seeds))], [LOSS + "_sum"], keepdims=0))
    nodes.append(helper.make_node("Cast", [LOSS + "_sum"], [LOSS], to=TensorProto.FLOAT))
    # the draws are graph outputs too, so that no optimisation drops them (Dropout at ratio 0 is an Identity)
    graph = helper.make_graph(nodes, f"{spec.op}_training", graph_inputs,
                              [helper.make_tensor_value_info(LOSS, TensorProto.FLOAT, []),
                               *(helper.make_empty_tensor_value_info(name) for name in forward.draws)],
                              initializer=initializers)
    opsets = dict(DEFAULT_OPSETS)
    if forward.opset is not None:
        opsets[forward.domain] = forward.opset
    if export is not None and export.opset is not None:  # the exporter's opset: the op's version current there
        opsets[forward.domain] = export.opset
    model = helper.make_model(graph, ir_version=onnx_model.IR_VERSION, producer_name="opconform",
                              opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    # With dynamic axes the incoming gradients have the forward outputs' unknown shapes: declared by rank only.
    dynamic = export is not None and export.dynamic_axes is not None
    starts = {y: (int(dtypes.ONNX[dtypes.name_of(v.dtype)]), [None if dynamic else int(d) for d in v.shape])
              for y, v in seeds.items()}
    return GradientGraph(model.SerializeToString(), feeds, wrt, starts, fetches, fetch_dtypes, list(forward.draws))


def _value_info(name: str, value: np.ndarray, dims: list):
    return helper.make_tensor_value_info(name, dtypes.ONNX[dtypes.name_of(value.dtype)], dims)


def _dims(export: Export | None, name: str, value: np.ndarray) -> list:
    """A forward input's declared dimensions: the case's sizes, or the exporter's dynamic axes (a name is a
    symbolic dimension, None an unknown one), as torch.onnx.export(dynamic_axes=...) writes them."""
    dims: list = [int(d) for d in value.shape]
    axes = export.dynamic_axes if export is not None else None
    if axes == "all":
        return [f"{name}_{axis}" for axis in range(value.ndim)]
    for axis, dim_name in (axes or {}).get(name, {}).items():
        if -value.ndim <= axis < value.ndim:
            dims[axis] = dim_name
    return dims


def _attribute_type(spec, name: str) -> str | None:
    attribute = spec.attributes.get(name) or spec.forward.own_attributes.get(name)
    return attribute.type if attribute else None


def classify_build_error(message: str) -> Rejected | Unsupported:
    """The builder's refusals: no gradient for the op or the type is a capability gap; anything else
    (an attribute the forward op rejects, shapes that do not infer) is a rejection of the inputs."""
    message = short_message(message)
    # A type the forward node does not take is a gap; a type clash in a node the builder wrote is its defect.
    type_gap = "Type Error" in message and ("in node (forward)" in message or "in node (" not in message)
    if type_gap or any(gap in message for gap in ("gradient builder has not been registered", "Could not find an "
                                                  "implementation", "is not a registered function/op")):
        return Unsupported(f"ORT's gradient builder: {message}")
    return Rejected(f"gradient builder: {message}")


def short_message(message: str) -> str:
    """ORT's message on one line, without the C++ signature of the function that checked it and without the
    [ONNXRuntimeError] prefix; the file:line where it was checked at the end."""
    message = " ".join(message.split())
    where = ""
    match = re.match(r"(\w+: )?/onnxruntime_src/\S*?([^/\s]+:\d+) (.*)", message)
    if match:
        where, rest = match.group(2), match.group(3)
        cut = re.search(r"\)(?: const)?>? ", rest)  # the end of the signature: what follows is what failed
        message = (match.group(1) or "") + (rest[cut.end():] if cut else rest)
    message = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", message)
    return f"{message} ({where})" if where else message


class OrtAutogradBackend(OrtBackend):
    SUBJECTS = ("kernel", "training_graph")  # builds the forward op and lets ORT's builder write the gradient: both subjects
    DIFFERENTIATES_FORWARD = True  # its outputs are the derivative a training graph computes (derivative_differs)
    HANDLER = "harness.backends.ort_autograd_session:handle"

    def __post_init__(self):
        self.name = "ort-autograd"
        # The gradient nodes it runs are `ort`'s kernels: their declared divergences hold here too; what
        # only the training graph gets wrong is declared for ort-autograd itself.
        self.divergences_from = "ort"
        self.inherited_must_reproduce = False

    def availability(self) -> str | None:
        reason = super().availability()
        if reason is None and not self.info().get("builder"):
            return "this onnxruntime-training has no GradientGraphBuilder"
        return reason

    def run(self, request: Request):
        graph = build(request)
        if isinstance(graph, Unsupported):
            return graph
        try:
            reply = self.worker.call({"call": "run", "model": graph.model, "feeds": graph.feeds, "wrt": graph.wrt,
                                      "starts": graph.starts,
                                      "fetches": graph.fetches + graph.draws, "threads": self.threads,
                                      "provider": self.provider},
                                     timeout=min(self.timeout, request.timeout or self.timeout))
        except HandlerError as e:
            return _classify(e)
        if isinstance(reply, (Crashed, TimedOut)):
            return reply
        grads, drawn = reply["outputs"][:len(graph.fetches)], reply["outputs"][len(graph.fetches):]
        fetched = iter(a.astype(dtypes.NUMPY[d], copy=False) for a, d in zip(grads, graph.fetch_dtypes))
        return Outputs([next(fetched) if wanted else None for wanted in request.outputs], tuple(reply["nodes"]),
                       dict(zip(graph.draws, drawn)))

    def time(self, request: Request, budget: dict):
        return Unsupported("ort-autograd is not benchmarked: its gradient nodes are the kernels `ort` times")

    def probe(self, request: Request) -> Support:
        """Supported when the builder differentiates the forward op in this dtype and the graph runs (the
        evidence: the gradient nodes it inserted); no_kernel with the reason when it cannot."""
        outcome = self.run(request)
        if isinstance(outcome, Outputs):
            return Support("supported", "gradient_graph", " ; ".join(outcome.nodes))
        if isinstance(outcome, Unsupported):
            structural = request.forward is None or request.spec.forward is None
            return Support("not_registered" if structural else "no_kernel", reason=outcome.reason)
        return Support("error", reason=f"the probe case did not run: {outcome}")


def _classify(e: HandlerError) -> Rejected | Unsupported:
    if e.cls == "OrtError":
        phase, cls, message = e.message.split("|", 2)
        return classify_build_error(message) if phase == "build" else classify_error(phase, cls, message)
    return classify_error("run", e.cls, e.message)
