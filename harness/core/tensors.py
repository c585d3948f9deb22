"""Input tensors of a case, made at run time from the case's seed.

Drawn inputs (incoming gradients, forward inputs) come from the spec's generators in float64 and are
rounded to the case dtype. Forward outputs and saved activations are what a real training step would
hold: the float64 forward reference applied to the stored forward inputs, rounded once.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from harness.core import dtypes, generators
from harness.core.cases import SHAPE, Case, stable_seed
from harness.spec.dotted import resolve
from harness.spec.errors import exception_text
from harness.spec.model import Forward, Generator, InvalidGroup, Spec

DRAWN_ROLES = ("grad_output", "forward_input")
DERIVED_ROLES = ("forward_output", "saved_activation")
DEFAULT_GENERATOR = Generator()


class CaseError(ValueError):
    """The spec cannot build this case (a spec bug, reported as an error result, never a crash)."""


def resolve_attributes(spec: Spec, written: dict) -> dict:
    """Every attribute the op has: the written value, else its default; and the model-declared output shapes
    that came with them (Spec.declared_shapes)."""
    resolved = {name: written.get(name, attr.default) for name, attr in spec.attributes.items()}
    resolved.update({key: written[key] for key in spec.declared_shapes() if key in written})
    return resolved


def declared_output_shapes(case: Case) -> dict[str, list[int]]:
    """`<output>_shape` -> the shape of the forward input it names, for outputs the model must size."""
    _, forward_shapes = _rule_shapes(case, derive=False)
    return {key: list(forward_shapes[source]) for key, source in case.spec.declared_shapes().items()
            if forward_shapes.get(source) is not None}


def _forward_of(case: Case) -> Forward:
    """The spec's forward section; only the inputs a forward op makes or takes ask for it."""
    if case.spec.forward is None:
        raise CaseError("inputs with role forward_output or saved_activation need a `forward:` section")
    return case.spec.forward


def forward_attributes(case: Case) -> dict:
    """The forward op's attributes: the shared spec attributes, then its own (group params override defaults)."""
    spec, forward = case.spec, _forward_of(case)
    attrs = resolve_attributes(spec, case.node_attributes)
    shared = {a: attrs[a] for a in forward.attributes}
    own = {name: case.params.get(name, attr.default) for name, attr in forward.own_attributes.items()}
    return {**shared, **own}


def input_shapes(case: Case) -> dict[str, tuple[int, ...] | None]:
    shapes, _ = _rule_shapes(case)
    overrides = case.group.shapes if isinstance(case.group, InvalidGroup) else {}
    # An invalid case changes the named inputs only: the others keep the shapes the rules give them.
    return {**shapes, **{name: tuple(shape) for name, shape in overrides.items()}}


def _rule_shapes(case: Case, derive: bool = True) -> tuple[dict, dict]:
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
        rule = _forward_of(case).shapes.get(name)
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
            shape = None if from_hook[name] is None else tuple(from_hook[name])
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
            shape = tuple(params[SHAPE])
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


def _forward_output_shapes(case: Case, shapes, forward_shapes, names) -> dict:
    """Shapes of saved forward outputs without a rule: the forward reference run on zeros of the input shapes.
    An invalid case whose inputs do not fit the forward op falls back to the `shape` param."""
    spec, forward = case.spec, _forward_of(case)
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


def draw(gen: Generator, shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """float64 values for one tensor; special values are planted at random positions."""
    size = math.prod(shape)
    if gen.values is not None:
        literal = np.array([dtypes.special_value(v, dtype) for v in gen.values], dtype=np.float64)
        values = np.resize(literal, size)
    elif gen.distribution == "normal":
        values = rng.normal(gen.mean, gen.std, size)
    else:
        values = rng.uniform(gen.low, gen.high, size)
    if gen.special and size:
        count = min(size, max(len(gen.special), round(gen.fraction * size)))
        where = rng.choice(size, count, replace=False)
        planted = np.array([dtypes.special_value(v, dtype) for v in gen.special], dtype=np.float64)
        values[where] = np.resize(planted, count)
    return values.reshape(shape)


def draw_integers(gen, name: str, shape, dtype: str, rng, shapes: dict, params: dict) -> np.ndarray:
    """A mask, labels, indices or shape_of tensor, drawn as integers and stored in the input's dtype.
    shapes: the op and forward inputs' shapes; params: the case params and the attributes (bounds read both)."""
    try:
        if gen.kind == "mask":
            values = generators.draw_mask(gen, shape, rng)
        elif gen.kind == "labels":
            values = generators.draw_labels(gen, shape, rng, shapes, params)
        elif gen.kind == "shape_of":
            values = generators.draw_shape_of(gen, shape, shapes)
        else:
            values = generators.draw_indices(gen, shape, rng, shapes, params)
    except generators.BoundError as e:
        raise CaseError(f"input '{name}' ({gen.kind}): {e}") from e
    target = dtypes.NUMPY[dtype]
    if target.kind in "iu" and values.size and (values.min() < np.iinfo(target).min or values.max() > np.iinfo(target).max):
        raise CaseError(f"input '{name}' ({gen.kind}): values do not fit {dtype}")
    return values.astype(target)


def _rng(case_seed: int, name: str) -> np.random.Generator:
    # One stream per tensor name: adding an input to a spec leaves the other tensors' values alone.
    return np.random.default_rng([case_seed, stable_seed(name)])


def _cast(values: np.ndarray, dtype: str) -> np.ndarray:
    target = dtypes.NUMPY[dtype]
    if target.kind in "iu":
        values = np.rint(values)
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(target)


def make_inputs(case: Case, global_seed: int = 0) -> dict[str, np.ndarray | None]:
    """The case's inputs, in the dtypes the spec binds, None for omitted optional inputs."""
    return make_tensors(case, global_seed)[0]


def make_tensors(case: Case, global_seed: int = 0) -> tuple[dict, dict]:
    """(op inputs, float64 forward inputs the derived inputs were computed from; {} if none)."""
    spec = case.spec
    seed = case.seed(global_seed)
    shapes = input_shapes(case)
    generators = {**spec.cases.inputs, **case.group.inputs}
    overridden = case.group.shapes if isinstance(case.group, InvalidGroup) else {}
    inputs: dict[str, np.ndarray | None] = {}

    @functools.cache
    def integer_context() -> tuple[dict, dict]:
        # bounds and shape_of may name forward-only inputs (GatherGrad's X) and read the axis from an attribute
        _, forward_shapes = _rule_shapes(case, derive=False)
        return {**forward_shapes, **shapes}, {**resolve_attributes(spec, case.node_attributes), **case.params}

    def draw_input(name: str, shape, dtype: str) -> np.ndarray:
        gen = generators.get(name, DEFAULT_GENERATOR)
        if gen.kind != "float":
            return draw_integers(gen, name, shape, dtype, _rng(seed, name), *integer_context())
        if dtypes.NUMPY[dtype].kind in "biu" and gen.values is None:
            raise CaseError(f"input '{name}' is {dtype}: give it literal `values` or a generator of kind mask, "
                            "labels or indices, not a float distribution")
        return _cast(draw(gen, shape, dtype, _rng(seed, name)), dtype)

    derived, forward_args = [], {}
    for inp in spec.inputs:
        dtype = case.input_dtype(inp)
        if shapes[inp.name] is None:
            inputs[inp.name] = None
        elif inp.role in DRAWN_ROLES or inp.name in overridden or inp.name in case.group.inputs:
            # A group may draw a forward output directly (e.g. Y outside Sigmoid's range) instead of deriving it.
            inputs[inp.name] = draw_input(inp.name, shapes[inp.name], dtype)
        else:
            derived.append(inp)
    if spec.forward is not None:
        forward_args = forward_arguments(case, inputs, draw_input)
    if derived:
        forward_values = _run_forward(case, forward_args)
        for inp in derived:
            value = forward_values.get(inp.forward_name or inp.name) if forward_values else None
            if value is None:  # only invalid cases get here: their shapes may not fit the forward op
                value = draw_input(inp.name, shapes[inp.name], case.input_dtype(inp))
            inputs[inp.name] = _cast(value, case.input_dtype(inp))
    return inputs, forward_args


def forward_arguments(case: Case, inputs, draw_input) -> dict[str, np.ndarray | None]:
    """The forward op's inputs in float64: the op's own forward inputs, others drawn (Sigmoid's X)."""
    spec, forward = case.spec, _forward_of(case)
    by_forward_name = {(i.forward_name or i.name): i for i in spec.inputs if i.role == "forward_input"}
    _, forward_shapes = _rule_shapes(case)  # forward-only inputs: the hook's shape or their forward.shapes rule
    args = {}
    for name in forward.inputs:
        if name in by_forward_name:
            value = inputs[by_forward_name[name].name]
            args[name] = None if value is None else value.astype(np.float64)
        else:
            shape = forward_shapes.get(name)
            args[name] = None if shape is None else draw_input(name, tuple(shape), case.dtype).astype(np.float64)
    return args


def _run_forward(case: Case, args: dict) -> dict[str, np.ndarray] | None:
    """Forward outputs by name; None when an invalid case's inputs do not fit the forward op."""
    forward = _forward_of(case)
    try:
        with np.errstate(all="ignore"):
            result = resolve(forward.reference)(**args, **forward_attributes(case))
    except Exception as e:
        if case.valid:
            raise CaseError(f"forward reference {forward.reference} failed: {exception_text(e)}") from e
        return None
    result = result if isinstance(result, tuple) else (result,)
    return dict(zip(forward.outputs, result))


def forward_call_parts(case: Case, inputs: dict, forward_args: dict) -> tuple[dict, dict, str]:
    """(forward inputs in their case dtypes, forward attributes as the case writes them, why the case
    cannot run from them or ''), for backends that differentiate the forward op themselves."""
    spec, forward = case.spec, _forward_of(case)
    overridden = case.group.shapes if isinstance(case.group, InvalidGroup) else {}
    # a training graph makes derived inputs, and shape_of ones (GatherGrad's shape = Shape(X)), itself
    made_by_graph = [i.name for i in spec.inputs if i.role in DERIVED_ROLES
                     or getattr(spec.cases.inputs.get(i.name), "kind", "") == "shape_of"]
    planted = [name for name in made_by_graph if name in case.group.inputs]
    missing = ""
    if planted:
        missing = (f"group {case.group.name} sets {', '.join(planted)} directly, not through {forward.op}: "
                   "no forward inputs produced them")
    elif overridden:
        missing = (f"invalid group {case.group.name} gives {', '.join(overridden)} a shape of its own; a gradient "
                   f"graph takes its tensors from {forward.op}, so they cannot disagree there")
    by_forward_name = {(i.forward_name or i.name): i.name for i in spec.inputs if i.role == "forward_input"}
    values = {}
    for name in forward.inputs:
        if name in by_forward_name:
            values[name] = inputs.get(by_forward_name[name])
        else:  # drawn in the case dtype, held in float64: the cast back is exact
            value = forward_args.get(name)
            values[name] = None if value is None else _cast(value, case.dtype)
    written = {a: case.attributes[a] for a in forward.attributes if a in case.attributes}
    written.update({a: case.params[a] for a in forward.own_attributes if a in case.params})
    return values, written, missing
