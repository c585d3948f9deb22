"""The census of a training graph: every gradient-side node, its shapes as run and as declared, grouped.

The graph runs once in an isolated worker (harness.model.shapes_worker) on inputs of the stated sample batch, every
node output fetched, so shapes and dtypes are what ORT computes, com.microsoft gradient ops included; the declared
shapes (symbolic dimensions and all) come from the graph's value_info and onnx's shape inference. A node is
gradient-side when it depends on the loss's incoming gradient or ORT's builder named it `<forward node>_Grad/...`.
Each gradient-side node is then
- a kernel configuration: its op is a kernel spec's op (ConvGrad, GatherGrad, ...), matched by its own inputs;
- covered through its forward node: the builder wrote it for a forward op with a training-graph spec
  (`MatMul` -> MatMulGradient), matched by the forward node's inputs and outputs;
- uncovered: neither (no spec for the op, e.g. the optimizer family, or for the forward op's gradient).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from harness.model.node import NodeConfig

GRAD_MARK = "_Grad/"
UNKNOWN = re.compile(r"^unk__\d+$")
SMALL = 64  # integer tensors up to this many elements travel with the configuration as values


class CensusError(Exception):
    """A graph the census cannot read (one line, for the command to print)."""


@dataclass(frozen=True)
class Tensor:
    dtype: str
    shape: tuple[int, ...]
    declared: tuple[int | str | None, ...] | None  # value_info's dims: ints, dim_params, None for unknown
    value: np.ndarray | None = None                 # small integer tensors only


@dataclass
class Configuration:
    """One distinct configuration of a spec's subject in the graph, and every node that has it."""
    spec: str                       # the spec's op
    kind: str                       # kernel | forward
    op: str                         # the node's op (the gradient op, or the forward op)
    domain: str
    node: NodeConfig
    dynamic_axes: dict[str, dict[int, str | None]]   # forward input -> {axis: dim_param or None}
    constants: list[str]            # forward inputs the graph holds as constants (training-graph specs)
    opset: int | None
    mismatch: str = ""              # the graph feeds the node an incoming gradient not shaped as its forward tensor
    nodes: list[str] = field(default_factory=list)   # the gradient-side nodes this configuration covers
    layers: list[str] = field(default_factory=list)  # the forward nodes they differentiate

    def key(self) -> str:
        node = self.node
        return json.dumps([self.spec, {k: v for k, v in node.shapes.items()}, node.dtypes, _plain(node.attributes),
                           list(node.outputs), {k: np.asarray(v).tolist() for k, v in node.values.items()},
                           {k: {str(a): n for a, n in v.items()} for k, v in self.dynamic_axes.items()},
                           self.constants, self.opset, self.mismatch], sort_keys=True, default=str)


@dataclass
class Uncovered:
    op: str
    domain: str
    reason: str
    nodes: list[str] = field(default_factory=list)


@dataclass
class Census:
    graph_nodes: int
    gradient_nodes: list[str]
    configurations: list[Configuration]
    uncovered: list[Uncovered]
    dims: dict[str, int]
    opset: int
    ops: dict[str, str] = field(default_factory=dict)  # gradient-side node -> domain::op


def _domain(domain: str | None) -> str:
    return "" if domain in (None, "", "ai.onnx") else domain


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def attributes_of(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: _plain(helper.get_attribute_value(a)) for a in node.attribute}


def declared_shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    """tensor -> declared dims from the graph's own value_info and onnx's shape inference (which adds what it can
    for standard ops; com.microsoft ops keep what the builder wrote)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # noqa: BLE001 - inference is a convenience; the graph's own value_info still counts
        inferred = model.graph
    found: dict[str, tuple] = {}
    for info in [*model.graph.input, *model.graph.output, *model.graph.value_info, *inferred.value_info]:
        t = info.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
        found.setdefault(info.name, dims)
    return found


def gradient_side(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Nodes downstream of the loss's incoming gradient, or named by the builder as part of a gradient."""
    graph = model.graph
    seeds = {f"{o.name}_grad" for o in graph.output}
    tainted = set(seeds)
    found = []
    for node in graph.node:  # the builder writes the graph in topological order
        if GRAD_MARK in node.name or any(i in tainted for i in node.input):
            found.append(node)
            tainted.update(o for o in node.output if o)
    return found


def forward_name(grad_node: onnx.NodeProto) -> str | None:
    return grad_node.name.split(GRAD_MARK)[0] if GRAD_MARK in grad_node.name else None


def constant_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for a in node.attribute:
                if a.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(a.t)
    return values


def shape_values(model: onnx.ModelProto, tensors: dict[str, Tensor]) -> dict[str, np.ndarray]:
    """The values a configuration carries: the graph's constants, and what Shape nodes compute (GatherGrad's `shape`
    input): values the graph fixes. Data (token ids, labels, masks) never: the census ran on placeholder inputs."""
    values = constant_values(model)
    for node in model.graph.node:
        if node.op_type == "Shape" and node.output and (t := tensors.get(node.output[0])) is not None \
                and t.value is not None:
            values[node.output[0]] = t.value
    return values


def _record(key: str, name: str, tensors: dict[str, Tensor], constants: dict[str, np.ndarray], shapes: dict,
            dtypes: dict, values: dict) -> bool:
    """One input as a configuration holds it: its shape (None when the node leaves it out), dtype and, for a small
    integer tensor the graph fixes, its value. True when the node has it."""
    tensor = tensors.get(name) if name else None
    shapes[key] = None if tensor is None else tensor.shape
    if tensor is None:
        return False
    dtypes[key] = tensor.dtype
    value = constants.get(name)
    if value is not None and np.asarray(value).size <= SMALL and np.asarray(value).dtype.kind in "iub":
        values[key] = np.asarray(value)
    return True


def take(spec, node: onnx.NodeProto, tensors: dict[str, Tensor], constants: dict[str, np.ndarray]) -> NodeConfig:
    """A kernel spec's view of its own gradient node: inputs and outputs by position, in schema order."""
    shapes: dict = {}
    dtypes: dict = {}
    values: dict = {}
    for i, inp in enumerate(spec.inputs):
        _record(inp.name, node.input[i] if i < len(node.input) else "", tensors, constants, shapes, dtypes, values)
    outputs = tuple(o.name for i, o in enumerate(spec.outputs) if i < len(node.output) and node.output[i])
    output_shapes = {o.name: tensors[node.output[i]].shape for i, o in enumerate(spec.outputs)
                     if i < len(node.output) and node.output[i] in tensors}
    return NodeConfig(spec.op, shapes, dtypes, values, attributes_of(node), outputs, output_shapes)


def gradient_mismatch(spec, node: onnx.NodeProto, tensors: dict[str, Tensor]) -> str:
    """An incoming gradient `<t>_grad` whose shape is not its forward tensor t's: the graph upstream left a
    broadcast unreduced (or reshaped it wrongly), so this node computes from a gradient of the wrong tensor."""
    for i, inp in enumerate(spec.inputs):
        name = node.input[i] if i < len(node.input) else ""
        if inp.role != "grad_output" or not name.endswith("_grad"):
            continue
        grad, base = tensors.get(name), tensors.get(name[:-5])
        if grad is not None and base is not None and grad.shape != base.shape:
            return (f"the training graph feeds {inp.name} = {name} of shape {list(grad.shape)}, but {name[:-5]} (the "
                    f"forward tensor it is the gradient of) has shape {list(base.shape)}: a gradient upstream was "
                    "not reduced to its tensor's shape, so this node's result is wrong")
    return ""


def take_forward(spec, node: onnx.NodeProto, tensors: dict[str, Tensor], constants: dict[str, np.ndarray],
                 has_grad: set[str]) -> NodeConfig:
    """A training-graph spec's view of a forward node: forward inputs by name, each grad_output shaped as the forward
    output it is the gradient of (None when the graph gives that output no gradient), outputs: the gradients the
    graph computes."""
    forward = spec.forward
    positions = {name: i for i, name in enumerate(forward.inputs)}
    out_positions = {name: i for i, name in enumerate(forward.outputs)}
    shapes: dict = {}
    dtypes: dict = {}
    values: dict = {}
    grads: set[str] = set()
    for inp in spec.inputs:
        if inp.role == "grad_output":
            k = out_positions.get(inp.grad_of or "", -1)
            name = node.output[k] if 0 <= k < len(node.output) else ""
            tensor = tensors.get(f"{name}_grad") if name and f"{name}_grad" in has_grad else None
            shapes[inp.name] = None if tensor is None else tensors[name].shape if name in tensors else tensor.shape
            if tensor is not None:
                dtypes[inp.name] = tensor.dtype
            continue
        k = positions.get(inp.forward_name or inp.name, -1)
        name = node.input[k] if 0 <= k < len(node.input) else ""
        if _record(inp.name, name, tensors, constants, shapes, dtypes, values) and f"{name}_grad" in has_grad:
            grads.add(inp.forward_name or inp.name)
    outputs = tuple(o.name for o in spec.outputs if o.grad_of in grads)
    return NodeConfig(spec.op, shapes, dtypes, values, attributes_of(node), outputs)


def dynamic_axes(spec, node: onnx.NodeProto, declared: dict[str, tuple], forward: bool) -> dict[str, dict[int, str | None]]:
    """Forward inputs' axes the graph declares symbolic (a dim_param) or unknown, as torch.onnx.export's dynamic_axes."""
    if spec.forward is None:
        return {}
    axes: dict[str, dict[int, str | None]] = {}
    if forward:
        tensors = {name: node.input[i] for i, name in enumerate(spec.forward.inputs) if i < len(node.input)}
    else:
        tensors = {}
        for i, inp in enumerate(spec.inputs):
            if inp.role == "forward_input" and i < len(node.input):
                tensors[inp.forward_name or inp.name] = node.input[i]
    for name, tensor in tensors.items():
        dims = declared.get(tensor) if tensor else None
        if dims is None:
            continue
        # ORT names the dimensions it could not infer unk__<n> when it writes the graph: to its builder they were
        # unknown (no name), which it treats otherwise than two distinct names (a broadcast it cannot prove)
        symbolic = {axis: (d if isinstance(d, str) and not UNKNOWN.match(d) else None)
                    for axis, d in enumerate(dims) if not isinstance(d, int)}
        if symbolic:
            axes[name] = symbolic
    return axes


def census(model: onnx.ModelProto, tensors: dict[str, Tensor], specs: Iterable, dims: dict[str, int]) -> Census:
    """Configurations (deduplicated, in graph order) and uncovered nodes of a training graph already run."""
    kernel = {(_domain(s.domain), s.op): s for s in specs if s.subject == "kernel"}
    by_forward = {(_domain(s.forward.domain), s.forward.op): s
                  for s in specs if s.subject == "training_graph" and s.forward is not None}
    training = {s.op: s for s in specs if s.subject == "training_graph"}
    declared = declared_shapes(model)
    constants = constant_values(model)
    tensors = dict(tensors)
    for name, value in constants.items():  # initializers and Constant outputs the run did not list
        if name not in tensors:
            small = value if value.size <= SMALL and value.dtype.kind in "iub" else None
            tensors[name] = Tensor(value.dtype.name, tuple(value.shape), declared.get(name), small)
    for node in gradient_side(model):  # a forward-only run (the whole graph crashed): t_grad is shaped as t
        for name in node.input:
            if name.endswith("_grad") and name not in tensors and name[:-5] in tensors:
                base = tensors[name[:-5]]
                tensors[name] = Tensor(base.dtype, base.shape, declared.get(name), None)
    fixed = shape_values(model, tensors)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    nodes_by_name = {n.name: n for n in model.graph.node}
    grad_nodes = gradient_side(model)
    has_grad = {name for name in tensors if name.endswith("_grad")}  # the loss's seed is an initializer
    configurations: dict[str, Configuration] = {}
    uncovered: dict[tuple, Uncovered] = {}
    forward_done: dict[str, Configuration | None] = {}

    def add(config: Configuration, grad_node: str, layer: str | None) -> None:
        found = configurations.setdefault(config.key(), config)
        found.nodes.append(grad_node)
        if layer and layer not in found.layers:
            found.layers.append(layer)

    # a forward node whose gradient holds a kernel spec's node (Gather -> GatherGrad) is covered by it: the
    # builder's helper nodes beside it (the Shape that feeds GatherGrad) belong to that configuration
    by_layer: dict[str, Configuration] = {}
    # the forward ops ORT rewrites into training kernels (LSTM -> LSTMTraining, GRU -> GRUTraining) have kernel specs
    # of their own: their nodes are configurations too, though they run before the loss
    grad_names = {(n.name, tuple(n.output)) for n in grad_nodes}
    for node in model.graph.node:
        spec = kernel.get((_domain(node.domain), node.op_type))
        if spec is not None and (node.name, tuple(node.output)) not in grad_names:
            config = Configuration(spec.op, "kernel", node.op_type, node.domain or "ai.onnx",
                                   take(spec, node, tensors, fixed),
                                   dynamic_axes(spec, node, declared, forward=False), [], opset)
            add(config, node.name, None)
    for node in grad_nodes:
        spec = kernel.get((_domain(node.domain), node.op_type))
        if spec is not None:
            config = Configuration(spec.op, "kernel", node.op_type, node.domain or "ai.onnx",
                                   take(spec, node, tensors, fixed),
                                   dynamic_axes(spec, node, declared, forward=False), [], opset,
                                   gradient_mismatch(spec, node, tensors))
            layer = forward_name(node)
            add(config, node.name, layer)
            if layer:
                by_layer.setdefault(layer, configurations[config.key()])
    for node in grad_nodes:
        domain = node.domain or ""
        layer = forward_name(node)
        if kernel.get((_domain(domain), node.op_type)) is not None:
            continue
        fnode = nodes_by_name.get(layer) if layer else None
        if fnode is not None and layer is not None:
            if layer not in forward_done:
                fdomain = _domain(fnode.domain)
                fspec = by_forward.get((fdomain, fnode.op_type))
                # an older form of the op (SplitGradient_13): a training-graph spec per forward opset, newest that fits
                forms = [s for s in training.values() if s.forward and s.forward.op == fnode.op_type
                         and _domain(s.forward.domain) == fdomain]
                if len(forms) > 1:
                    fitting = [s for s in forms if (s.forward.opset or 0) <= opset]
                    fspec = max(fitting or forms, key=lambda s: s.forward.opset or 0)
                if fspec is None:
                    forward_done[layer] = None
                else:
                    config = Configuration(fspec.op, "forward", fnode.op_type, fnode.domain or "ai.onnx",
                                           take_forward(fspec, fnode, tensors, fixed, has_grad),
                                           dynamic_axes(fspec, fnode, declared, forward=True),
                                           [n for i, n in enumerate(fspec.forward.inputs)
                                            if i < len(fnode.input) and fnode.input[i] in constants], opset)
                    found = configurations.setdefault(config.key(), config)
                    if layer not in found.layers:
                        found.layers.append(layer)
                    forward_done[layer] = found
            done = forward_done[layer]
            if done is not None:  # the forward op's training-graph spec covers its whole gradient (a Scale in it too)
                done.nodes.append(node.name)
                continue
            if layer in by_layer:  # else a kernel node of the same gradient: its helpers (GatherGrad's Shape)
                by_layer[layer].nodes.append(node.name)
                continue
            reason = f"no spec for the gradient of {fnode.op_type} (no kernel spec for {node.op_type}, no " \
                     f"{fnode.op_type}Gradient training-graph spec)"
        elif node.name.startswith("AccumulateGrad_"):
            reason = (f"no spec for {domain or 'ai.onnx'}::{node.op_type}: the builder's sum of the gradients a tensor "
                      "receives from its several consumers")
        else:
            reason = f"no spec for {domain or 'ai.onnx'}::{node.op_type}"
        entry = uncovered.setdefault((domain, node.op_type, reason), Uncovered(node.op_type, domain or "ai.onnx", reason))
        entry.nodes.append(node.name)
    return Census(len(model.graph.node), [n.name for n in grad_nodes], list(configurations.values()),
                  list(uncovered.values()), dims, opset,
                  {n.name: f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in grad_nodes})
