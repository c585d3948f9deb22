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
from harness.core.cases import Case, stable_seed
from harness.core.shapes import (
    DERIVED_ROLES,
    DRAWN_ROLES,
    CaseError,
    forward_attributes,
    forward_of,
    input_shapes,
    resolve_attributes,
    rule_shapes,
)
from harness.spec.dotted import resolve
from harness.spec.errors import exception_text
from harness.spec.model import Generator, InvalidGroup

DEFAULT_GENERATOR = Generator()


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
        values = np.asarray(np.rint(values))  # np.rint gives a NumPy scalar for a 0-d array
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
    inputs: dict[str, np.ndarray | list | None] = {}

    @functools.cache
    def integer_context() -> tuple[dict, dict]:
        # bounds and shape_of may name forward-only inputs (GatherGrad's X) and read the axis from an attribute
        _, forward_shapes = rule_shapes(case, derive=False)
        return {**forward_shapes, **shapes}, {**resolve_attributes(spec, case.node_attributes), **case.params}

    def draw_input(name: str, shape, dtype: str) -> np.ndarray:
        gen = generators.get(name, DEFAULT_GENERATOR)
        if gen.kind != "float":
            return draw_integers(gen, name, shape, dtype, _rng(seed, name), *integer_context())
        if dtypes.NUMPY[dtype].kind in "biu" and gen.values is None:
            raise CaseError(f"input '{name}' is {dtype}: give it literal `values` or a generator of kind mask, "
                            "labels or indices, not a float distribution")
        return _cast(draw(gen, shape, dtype, _rng(seed, name)), dtype)

    def draw_sequence(name: str, shapes: tuple, dtype: str) -> list[np.ndarray]:
        # one stream per element (`name[k]`), like one per tensor name
        gen = generators.get(name, DEFAULT_GENERATOR)
        if gen.kind != "float" or dtypes.NUMPY[dtype].kind in "biu":
            raise CaseError(f"input '{name}' is a sequence of {dtype}: only float generators draw sequences")
        return [_cast(draw(gen, shape, dtype, _rng(seed, f"{name}[{k}]")), dtype) for k, shape in enumerate(shapes)]

    derived, forward_args = [], {}
    for inp in spec.inputs:
        dtype = case.input_dtype(inp)
        if shapes[inp.name] is None:
            inputs[inp.name] = None
        elif spec.is_sequence(inp):  # a spec check keeps sequences drawn: no forward op makes one
            inputs[inp.name] = draw_sequence(inp.name, shapes[inp.name] or (), dtype)
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


def redraw_input(case: Case, name: str, call: int, shape: tuple, global_seed: int = 0) -> np.ndarray | list:
    """Input `name` drawn afresh for call `call` (2, 3, ...) of a stateful case (state.redraw: each step's
    gradients): the input's generator, a stream of its own per call (and per element of a sequence), the case dtype
    the spec binds; `shape` a sequence's tuple of element shapes."""
    spec = case.spec
    gen = {**spec.cases.inputs, **case.group.inputs}.get(name, DEFAULT_GENERATOR)
    inp = spec.input(name)
    dtype = case.input_dtype(inp)
    if gen.kind != "float" or dtypes.NUMPY[dtype].kind in "biu":
        raise CaseError(f"state.redraw: input '{name}' is {dtype} from a {gen.kind} generator; only float "
                        "inputs are redrawn per call")
    seed = case.seed(global_seed)
    if spec.is_sequence(inp):
        return [_cast(draw(gen, s, dtype, _rng(seed, f"{name}[{k}]@call{call}")), dtype) for k, s in enumerate(shape)]
    return _cast(draw(gen, shape, dtype, _rng(seed, f"{name}@call{call}")), dtype)


def forward_arguments(case: Case, inputs, draw_input) -> dict[str, np.ndarray | None]:
    """The forward op's inputs in float64: the op's own forward inputs, others drawn (Sigmoid's X)."""
    spec, forward = case.spec, forward_of(case)
    by_forward_name = {(i.forward_name or i.name): i for i in spec.inputs if i.role == "forward_input"}
    _, forward_shapes = rule_shapes(case)  # forward-only inputs: the hook's shape or their forward.shapes rule
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
    forward = forward_of(case)
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
    spec, forward = case.spec, forward_of(case)
    overridden = case.group.shapes if isinstance(case.group, InvalidGroup) else {}
    # a training graph makes derived inputs, and shape_of ones (GatherGrad's shape = Shape(X)), itself
    made_by_graph = [i.name for i in spec.inputs if i.role in DERIVED_ROLES
                     or getattr(spec.cases.inputs.get(i.name), "kind", "") == "shape_of"]
    planted = [name for name in made_by_graph if name in case.group.inputs]
    forward_names = {i.name: i.forward_name or i.name for i in spec.inputs if i.role == "forward_input"}
    missing = ""
    if planted:
        missing = (f"group {case.group.name} sets {', '.join(planted)} directly, not through {forward.op}: "
                   "no forward inputs produced them")
    elif unbuildable := [name for name in overridden if spec.subject != "training_graph"
                         or (of := forward_names.get(name)) is None or of not in forward.inputs or of in forward.draws]:
        # In a training_graph spec a forward input of a shape of its own is a forward model the builder or the
        # session must refuse (Mul of [2, 3] and [4]). In a kernel spec the mismatch is between the gradient op's
        # inputs (dY against X), which a training graph, taking dY's shape from the forward op, cannot express.
        missing = (f"invalid group {case.group.name} gives {', '.join(unbuildable)} a shape of its own; a gradient "
                   f"graph takes its tensors from {forward.op}, so they cannot disagree there")
    by_forward_name = {of: name for name, of in forward_names.items()}
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
