"""One configuration of a real graph's node -> the case params of the spec it matches, proven by rebuilding it.

A spec's `cases.from_node` hook (in the op's reference module) maps a NodeConfig to case params; without one, a
`shape` param (the first grad_output's shape) and params named after the inputs are tried. Whatever proposes the
params, they count only when the spec's own shape rules rebuild every input's shape from them, the dtype is the
spec's, every attribute written on the node is one the spec has, and the spec's contract (ranks, valid_if) accepts
the result: a configuration that fails any of these is outside the spec's contract, named with the reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.core import cases, dtypes
from harness.core.cases import Case
from harness.core.contract import input_problems
from harness.core.shapes import OMIT, OUTPUTS, CaseError, input_shapes
from harness.core.tensors import make_inputs
from harness.model.node import NodeConfig
from harness.spec.dotted import resolve
from harness.spec.errors import exception_text
from harness.spec.model import Spec

PROBE_GROUP = "model"  # the name of the group a configuration is rebuilt in before it is written anywhere


DATA_KINDS = ("mask", "labels", "indices")  # drawn data: a graph's placeholder values say nothing about them


@dataclass(frozen=True)
class Match:
    params: dict[str, Any] | None  # the case params (None: the configuration is outside the spec's contract)
    dtype: str
    why: str = ""                  # why not, when params is None
    inputs: dict[str, dict] | None = None  # literal generators for the graph's constants (group `inputs`)


def literal_inputs(spec: Spec, node: NodeConfig) -> dict[str, dict]:
    """`{input: {values: [...]}}` for the node's fixed values that the spec draws as floats or literals: the case then
    holds the graph's own constants (Reshape's shape, Pad's pads, axes). A `shape_of` input follows from the params
    (checked by rebuild_problem); drawn data (indices, masks, labels) stays drawn."""
    literal = {}
    for name, value in node.values.items():
        gen = spec.cases.inputs.get(name)
        kind = getattr(gen, "kind", "float")
        if kind in DATA_KINDS or kind == "shape_of":
            continue
        flat = np.asarray(value).reshape(-1).tolist()
        literal[name] = {"values": [bool(v) if isinstance(v, bool) else int(v) for v in flat] or [0]}
    return literal


def main_dtype(spec: Spec, node: NodeConfig) -> str | None:
    first = next((i for i in spec.inputs if i.role == "grad_output" and node.dtypes.get(i.name)), None)
    first = first or next((i for i in spec.inputs if node.dtypes.get(i.name)), None)
    return None if first is None else node.dtypes[first.name]


def _candidates(spec: Spec, node: NodeConfig) -> list[dict]:
    """Proposed params; a hook may add `inputs: {input: generator}` for what the params alone do not build (a Reshape
    whose shape the graph computes: `{shape: {kind: shape_of, of: dY}}`)."""
    if spec.cases.from_node:
        return [dict(resolve(spec.cases.from_node)(node))]
    found: list[dict] = []
    grad = next((i for i in spec.inputs if i.role == "grad_output" and node.shapes.get(i.name) is not None), None)
    if grad is not None:
        found.append({"shape": list(node.shape(grad.name))})
    for roles in (("forward_input",), ("forward_input", "grad_output", "forward_output", "saved_activation")):
        named = {i.name: list(node.shapes[i.name]) for i in spec.inputs  # type: ignore[arg-type]
                 if i.role in roles and i.name in spec.cases.params and node.shapes.get(i.name) is not None}
        if named and named not in found:
            found.append(named)
    return found


def case_for(spec: Spec, params: dict, dtype: str, name: str = PROBE_GROUP, inputs: dict | None = None) -> Case:
    """harness.core.cases.case_for, in the probe group unless named."""
    return cases.case_for(spec, params, dtype, name, inputs)


def _outputs_and_omit(spec: Spec, node: NodeConfig, params: dict) -> dict:
    params = dict(params)
    names = [o.name for o in spec.outputs]
    if node.outputs and set(node.outputs) != set(names) and OUTPUTS not in params:
        params[OUTPUTS] = [n for n in names if n in node.outputs]
    absent = [i.name for i in spec.inputs if i.optional and i.name in node.shapes and node.shapes[i.name] is None]
    if absent and OMIT not in params:
        params[OMIT] = absent
    return params


def rebuild_problem(spec: Spec, node: NodeConfig, case: Case, shapes: dict) -> str | None:
    """None when the spec's rules rebuild the node's inputs exactly from the case's params (shapes: its input
    shapes); else what differs."""
    params = case.params
    for inp in spec.inputs:
        if inp.name not in node.shapes:
            continue
        want, got = node.shapes[inp.name], shapes.get(inp.name)
        if (None if want is None else tuple(want)) != (None if got is None else tuple(got)):
            return (f"input {inp.name}: the node's shape {_shown(want)} is not the {_shown(got)} the spec's rules give "
                    f"for {params}")
    checked = [name for name in node.values if name in shapes
               and getattr(spec.cases.inputs.get(name), "kind", "float") not in DATA_KINDS]
    try:
        made_all = make_inputs(case)
    except (CaseError, ValueError, KeyError, TypeError, IndexError) as e:
        return f"the params {params} do not build the inputs: {exception_text(e)}"
    for name in checked:
        value = node.values[name]
        made = made_all[name]
        if made is None or made.shape != np.asarray(value).shape or not np.array_equal(made, np.asarray(value)):
            return f"input {name}: the graph's constant {np.asarray(value).tolist()} is not what the params build"
    return None


def _shown(shape) -> str:
    return "absent" if shape is None else "[" + ", ".join(map(str, shape)) + "]"


def contract_problems(spec: Spec, node: NodeConfig, case: Case, shapes: dict) -> list[str]:
    """The contract's problems with the node's shapes, dtypes and attributes (placeholder values: never judged)."""
    zeros: dict = {}
    for inp in spec.inputs:
        shape = shapes.get(inp.name)
        dtype = dtypes.NUMPY[node.dtypes.get(inp.name) or case.input_dtype(inp)]
        if shape is None:
            zeros[inp.name] = None
        elif spec.is_sequence(inp):  # a list of zero tensors of the element shapes
            zeros[inp.name] = [np.zeros(s, dtype) for s in shape]
        else:
            zeros[inp.name] = np.zeros(shape, dtype)
    return input_problems(spec, zeros, case.node_attributes, values=False)


def match(spec: Spec, node: NodeConfig) -> Match:
    """The case params that rebuild this configuration in the spec, or why there are none."""
    dtype = main_dtype(spec, node) or "float32"
    allowed = spec.type_constraints[spec.main_type].types
    if dtype not in allowed:
        return Match(None, dtype, f"{spec.op} is specified for {', '.join(allowed)}, not {dtype}")
    unknown = sorted(a for a in node.attributes if a not in spec.attributes)
    if unknown:
        return Match(None, dtype, f"the node writes attribute{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}, "
                                  f"which {spec.op}'s spec does not have")
    try:
        candidates = _candidates(spec, node)
    except Exception as e:  # noqa: BLE001 - a hook's failure is this configuration's finding, not the run's end
        return Match(None, dtype, f"{spec.cases.from_node} raised {exception_text(e)}")
    if not candidates:
        return Match(None, dtype, f"{spec.op}'s spec has no cases.from_node hook and no `shape` param fits")
    attributes = {k: v for k, v in node.attributes.items() if k in spec.attributes}
    literal = literal_inputs(spec, node)
    problems = []
    for candidate in candidates:
        inputs = {**candidate.pop("inputs", {}), **literal}
        params = _outputs_and_omit(spec, node, {**candidate, **attributes})
        try:
            case = case_for(spec, params, dtype, inputs=inputs)
            shapes = input_shapes(case)
        except (CaseError, ValueError, KeyError, TypeError, IndexError) as e:
            problems.append(f"the params {params} do not build a case: {exception_text(e)}")
            continue
        problem = rebuild_problem(spec, node, case, shapes)
        if problem is None:
            broken = contract_problems(spec, node, case, shapes)
            if broken:
                return Match(None, dtype, "outside the spec's contract: " + "; ".join(broken))
            return Match(params, dtype, inputs=inputs or None)
        problems.append(problem)
    return Match(None, dtype, problems[0])


def node_of_case(case: Case, with_values: bool = True) -> NodeConfig:
    """The NodeConfig a graph would show for this case (the round trip the tests run over every spec's cases)."""
    spec = case.spec
    def plain(name: str, shape):  # ints as a graph gives them; a sequence's is a tuple of element shapes
        if shape is None:
            return None
        if spec.is_sequence(spec.input(name)):
            return tuple(tuple(int(d) for d in s) for s in shape)
        return tuple(int(d) for d in shape)

    shapes = {name: plain(name, s) for name, s in input_shapes(case).items()}
    values: dict[str, np.ndarray] = {}
    if with_values:
        made = make_inputs(case)
        generators = {**spec.cases.inputs, **case.group.inputs}
        for i in spec.inputs:
            value = made.get(i.name)
            if value is not None and dtypes.NUMPY[case.input_dtype(i)].kind in "iub" and value.size <= 64 \
                    and getattr(generators.get(i.name), "kind", "float") not in DATA_KINDS:
                values[i.name] = value
    return NodeConfig(op=spec.op, shapes=shapes,
                      dtypes={i.name: case.input_dtype(i) for i in spec.inputs if shapes.get(i.name) is not None},
                      values=values, attributes=dict(case.node_attributes),
                      outputs=case.requested_outputs)
