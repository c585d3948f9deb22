"""The shape rules: every input's shape as a case's spec declares or derives it.

An input's shape comes from the group's shapes hook, `omit`, `shape_from`, `shape_fn`, a literal `shape`, the
forward reference's output (derived inputs), or the case's `shape` param; forward-only inputs from forward.shapes.
Output shapes the model must be told (`dX_shape`, Spec.declared_shapes) come from the same rules. Case expansion
(harness.core.cases) reads them for Case.attributes and tensor making (harness.core.tensors) for the values, so
this module imports neither: a case is read through the few fields it needs (ShapedCase).
"""
from __future__ import annotations

from typing import Any, Protocol

from harness.spec.dotted import resolve
from harness.spec.errors import exception_text
from harness.spec.model import Forward, Group, InvalidGroup, Spec

# Case parameters with a meaning of their own; the rest are attributes or hook parameters.
SHAPE, OUTPUTS, OMIT, STEPS = "shape", "outputs", "omit", "steps"
BUILTIN_PARAMS = (SHAPE, OUTPUTS, OMIT, STEPS)
DRAWN_ROLES = ("grad_output", "forward_input")
DERIVED_ROLES = ("forward_output", "saved_activation")


class ShapedCase(Protocol):
    """What the shape rules read of a case (harness.core.cases.Case)."""
    @property
    def spec(self) -> Spec: ...
    @property
    def group(self) -> Group | InvalidGroup: ...
    @property
    def params(self) -> dict[str, Any]: ...
    @property
    def valid(self) -> bool: ...
    @property
    def node_attributes(self) -> dict[str, Any]: ...
    @property
    def omitted_inputs(self) -> tuple[str, ...]: ...


class CaseError(ValueError):
    """The spec cannot build this case (a spec bug, reported as an error result, never a crash)."""


def as_shape(shape, sequence: bool) -> tuple:
    """A shape written in a spec, a case param or a hook, as a tuple; a sequence's is a tuple of its elements'
    shapes (harness.core.sequences)."""
    return tuple(tuple(s) for s in shape) if sequence else tuple(shape)


def resolve_attributes(spec: Spec, written: dict) -> dict:
    """Every attribute the op has: the written value, else its default; and the model-declared output shapes
    that came with them (Spec.declared_shapes)."""
    resolved = {name: written.get(name, attr.default) for name, attr in spec.attributes.items()
                if not attr.copied_by_builder}  # taken by the node, never read by the op (Attribute.copied_by_builder)
    resolved.update({key: written[key] for key in spec.declared_shapes() if key in written})
    return resolved


def declared_output_shapes(case: ShapedCase) -> dict[str, list[int]]:
    """`<output>_shape` -> the shape of the forward input it names, for outputs the model must size."""
    _, forward_shapes = rule_shapes(case, derive=False)
    return {key: list(forward_shapes[source]) for key, source in case.spec.declared_shapes().items()
            if forward_shapes.get(source) is not None}


def forward_of(case: ShapedCase) -> Forward:
    """The spec's forward section; only the inputs a forward op makes or takes ask for it."""
    if case.spec.forward is None:
        raise CaseError("inputs with role forward_output or saved_activation need a `forward:` section")
    return case.spec.forward


def forward_attributes(case: ShapedCase) -> dict:
    """The forward op's attributes: the shared spec attributes, then its own (group params override defaults)."""
    spec, forward = case.spec, forward_of(case)
    written = case.node_attributes
    shared = {a: written.get(a, spec.attributes[a].default) for a in forward.attributes}
    own = {name: case.params.get(name, attr.default) for name, attr in forward.own_attributes.items()}
    return {**shared, **own}


def input_shapes(case: ShapedCase) -> dict[str, tuple[int, ...] | None]:
    shapes, _ = rule_shapes(case)
    overrides = case.group.shapes if isinstance(case.group, InvalidGroup) else {}
    # An invalid case changes the named inputs only: the others keep the shapes the rules give them.
    return {**shapes, **{name: as_shape(shape, case.spec.is_sequence(case.spec.input(name)))
                         for name, shape in overrides.items()}}


def rule_shapes(case: ShapedCase, derive: bool = True) -> tuple[dict, dict]:
    """(op input shapes, forward-only input shapes) as the spec's rules give them, before invalid overrides;
    derive=False leaves derived inputs without a rule at None (no forward run)."""
    spec, params = case.spec, case.params
    context = {**resolve_attributes(spec, case.node_attributes), **params}
    from_hook = resolve(spec.cases.shapes)(params) if spec.cases.shapes else {}
    shapes: dict[str, tuple[int, ...] | None] = {}
    forward_shapes: dict[str, tuple[int, ...] | None] = {}
    op_inputs = {i.name for i in spec.inputs}
    derived_from_forward: list[str] = []
    by_forward_name = {(i.forward_name or i.name): i.name for i in spec.inputs if i.role == "forward_input"}

    def forward_shape(name: str, seen) -> tuple[int, ...] | None:
        """The shape of a forward input: the op input it is, the hook's, or its rule in forward.shapes."""
        if name in by_forward_name:
            return shape_of(by_forward_name[name], seen)
        if name in forward_shapes:
            return forward_shapes[name]
        if name in seen:
            raise CaseError(f"forward input '{name}': shape rules form a cycle through {', '.join(seen)}")
        rule = forward_of(case).shapes.get(name)
        if name in from_hook:
            shape = None if from_hook[name] is None else tuple(from_hook[name])
        elif rule is None:
            raise CaseError(f"forward input '{name}' is not an input of {spec.op}: give it a rule in forward.shapes")
        elif rule.shape is not None:
            shape = tuple(rule.shape)
        elif rule.shape_from:
            source = rule.shape_from
            shape = shape_of(source, (*seen, name)) if source in op_inputs else forward_shape(source, (*seen, name))
        else:
            deps = {i.name: shape_of(i.name, (*seen, name)) for i in spec.inputs if i.name not in seen}
            shape = tuple(resolve(rule.shape_fn)(deps, context))
        forward_shapes[name] = shape
        return shape

    def shape_of(name: str, seen=()) -> tuple[int, ...] | None:
        if name in shapes:
            return shapes[name]
        if name in seen:
            raise CaseError(f"input '{name}': shape rules form a cycle through {', '.join(seen)}")
        inp = spec.input(name)
        if name in case.omitted_inputs:
            shape = None
        elif name in from_hook:  # the hook may leave an optional input out (None), e.g. GRU's sequence_lens
            if from_hook[name] is None and not inp.optional:
                raise CaseError(f"input '{name}' is required but {spec.cases.shapes} gave it no shape")
            shape = None if from_hook[name] is None else as_shape(from_hook[name], spec.is_sequence(inp))
        elif inp.shape_from:
            shape = shape_of(inp.shape_from, (*seen, name))
        elif inp.shape_fn:
            deps = {i.name: shape_of(i.name, (*seen, name)) for i in spec.inputs[: spec.inputs.index(inp)]}
            shape = tuple(resolve(inp.shape_fn)(deps, context))
        elif inp.shape is not None:
            shape = tuple(inp.shape)
        elif inp.role in DERIVED_ROLES and spec.forward and (inp.forward_name or name) in spec.forward.outputs:
            derived_from_forward.append(name)  # the forward reference's output shape, filled in below
            shape = None
        elif SHAPE in params:
            shape = as_shape(params[SHAPE], spec.is_sequence(inp))
        else:
            raise CaseError(f"input '{name}': no shape; give the group a `shape` param or the input a shape rule")
        shapes[name] = shape
        return shape

    for inp in spec.inputs:
        shape_of(inp.name)
    if spec.forward:
        for name in spec.forward.inputs:
            forward_shape(name, ())
    if derived_from_forward and derive:
        shapes.update(_forward_output_shapes(case, shapes, forward_shapes, derived_from_forward))
    return shapes, forward_shapes


def _forward_output_shapes(case: ShapedCase, shapes, forward_shapes, names) -> dict:
    """Shapes of saved forward outputs without a rule: the forward reference run on zeros of the input shapes.
    An invalid case whose inputs do not fit the forward op falls back to the `shape` param."""
    import numpy as np  # lazy: case expansion (harness.core.cases) imports this module and stays numpy-free

    spec, forward = case.spec, forward_of(case)
    by_forward_name = {(i.forward_name or i.name): i.name for i in spec.inputs if i.role == "forward_input"}
    args = {}
    for name in forward.inputs:
        shape = shapes[by_forward_name[name]] if name in by_forward_name else forward_shapes.get(name)
        args[name] = None if shape is None else np.zeros(shape)
    try:
        with np.errstate(all="ignore"):
            result = resolve(forward.reference)(**args, **forward_attributes(case))
    except Exception as e:
        if case.valid:
            raise CaseError(f"forward reference {forward.reference} failed on zeros to give the shapes of "
                            f"{', '.join(names)}: {exception_text(e)}; give them a shape rule") from e
        if SHAPE not in case.params:
            raise CaseError(f"inputs {', '.join(names)}: the forward op does not fit this invalid case; give them "
                            "shapes in the group's `shapes`") from e
        return {name: tuple(case.params[SHAPE]) for name in names}
    produced = dict(zip(forward.outputs, result if isinstance(result, tuple) else (result,)))
    return {name: np.shape(produced[spec.input(name).forward_name or name]) for name in names}
