"""Rules across fields that the schema cannot express: names that must exist, defaults in range,
hooks that import, reference signatures that take the spec's inputs, case globs that match cases."""
from __future__ import annotations

import difflib
import fnmatch
import inspect

from harness.cases import BUILTIN_PARAMS, OMIT, OUTPUTS, SHAPE, expand, group_params
from harness.contract import value_problem
from harness.dotted import DottedError, resolve
from harness.spec.model import BUILTIN_TRANSFORMS, Spec

BACKEND_NAMES = ("reference", "openmp", "ort", "ort-cuda")


def unknown_name(kind: str, name: str, known) -> str:
    known = [str(k) for k in known]
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1)
    return (f"unknown {kind} '{name}'" + (f"; did you mean '{by_lower[close[0]]}'?" if close else "")
            + f" (known: {', '.join(known) or 'none'})")


def check(spec: Spec) -> list[tuple[str, str]]:
    """(field, message) for every cross-field problem."""
    out: list[tuple[str, str]] = []
    in_names = [i.name for i in spec.inputs]
    out_names = [o.name for o in spec.outputs]
    fwd_in = spec.forward.inputs if spec.forward else []
    fwd_out = spec.forward.outputs if spec.forward else []

    for kind, names in (("input", in_names), ("output", out_names)):
        for name in {n for n in names if names.count(n) > 1}:
            out.append((f"{kind}s", f"the name '{name}' is used twice; give each {kind} its own name"))

    for i, inp in enumerate(spec.inputs):
        where = f"inputs[{i}]"
        if inp.type not in spec.type_constraints:
            out.append((f"{where}.type", unknown_name("type variable", inp.type, spec.type_constraints)))
        if inp.shape_from and inp.shape_from not in in_names:
            out.append((f"{where}.shape_from", unknown_name("input", inp.shape_from, in_names)))
        if inp.shape_from and inp.shape_fn:
            out.append((where, "give shape_from or shape_fn, not both"))
        if inp.role == "grad_output":
            if not spec.forward:
                out.append((where, "a grad_output needs a `forward:` section naming the forward op"))
            elif inp.grad_of not in fwd_out:
                out.append((f"{where}.grad_of", f"write the forward output this is the gradient of: one of {', '.join(fwd_out)}"))
        elif inp.grad_of:
            out.append((f"{where}.grad_of", "only a grad_output input has grad_of"))
        if inp.role in ("forward_input", "forward_output", "saved_activation") and spec.forward:
            pool = fwd_in if inp.role == "forward_input" else fwd_out
            name = inp.forward_name or inp.name
            if name not in pool:
                out.append((f"{where}.forward_name", f"{inp.role} '{name}' is not among forward.{'inputs' if inp.role == 'forward_input' else 'outputs'} "
                            f"({', '.join(pool)}); set forward_name to one of them"))
        elif inp.role in ("forward_output", "saved_activation"):
            out.append((where, f"a {inp.role} is made by the forward op: add a `forward:` section"))

    for i, o in enumerate(spec.outputs):
        where = f"outputs[{i}]"
        if o.type not in spec.type_constraints:
            out.append((f"{where}.type", unknown_name("type variable", o.type, spec.type_constraints)))
        if o.shape_from and o.shape_from not in in_names:
            out.append((f"{where}.shape_from", unknown_name("input", o.shape_from, in_names)))
        if o.grad_of and o.grad_of not in fwd_in:
            out.append((f"{where}.grad_of", f"write the forward input this is the gradient of: one of {', '.join(fwd_in) or '(no forward section)'}"))

    for name, attr in spec.attributes.items():
        where = f"attributes.{name}"
        if attr.required and attr.default is not None:
            out.append((where, "a required attribute has no default; drop `default` or `required`"))
        if attr.default is not None and (problem := value_problem(attr, attr.default)):
            out.append((f"{where}.default", f"the default {problem}"))
        if attr.axis_of and attr.axis_of not in in_names:
            out.append((f"{where}.axis_of", unknown_name("input", attr.axis_of, in_names)))
    if spec.forward:
        for name in spec.forward.attributes:
            if name not in spec.attributes:
                out.append(("forward.attributes", unknown_name("attribute", name, spec.attributes)))
    if spec.own_saved_state:
        for name in spec.own_saved_state.outputs:
            if name not in in_names:
                out.append(("own_saved_state.outputs", unknown_name("input", name, in_names)))
            elif spec.input(name).role not in ("saved_activation", "forward_output"):
                out.append(("own_saved_state.outputs", f"input {name} is a {spec.input(name).role}; only saved_activation "
                                                       "or forward_output inputs come from the forward op"))

    out += _check_hooks(spec)
    out += _check_cases(spec, in_names, out_names, fwd_in)
    return out


def _check_hooks(spec: Spec) -> list[tuple[str, str]]:
    out = []
    hooks = {"reference": spec.reference, "valid_if": spec.valid_if, "cases.shapes": spec.cases.shapes,
             "accuracy.reduction_length": spec.accuracy.reduction_length if spec.accuracy else None,
             "accuracy.magnitude": spec.accuracy.magnitude if spec.accuracy and spec.accuracy.magnitude else None,
             "forward.reference": spec.forward.reference if spec.forward else None}
    hooks.update({f"inputs[{i}].shape_fn": inp.shape_fn for i, inp in enumerate(spec.inputs)})
    hooks.update({f"alternative_semantics[{i}].reference": a.reference for i, a in enumerate(spec.alternative_semantics)})
    for where, path in hooks.items():
        if path is None:
            continue
        try:
            fn = resolve(path)
        except DottedError as e:
            out.append((where, f"{e}; write module.path:function of an existing function"))
            continue
        if where in ("reference", "forward.reference") or where.startswith("alternative_semantics"):
            like_reference = where != "forward.reference"  # alternatives are called like the reference
            names = [i.name for i in spec.inputs] if like_reference else list(spec.forward.inputs)
            attrs = list(spec.attributes) if like_reference else list(spec.forward.attributes)
            params = inspect.signature(fn).parameters
            takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
            missing = [n for n in [*names, *attrs] if n not in params and not takes_any]
            if missing:
                out.append((where, f"{path} does not take {', '.join(missing)}; its parameters must be named "
                            f"like the {'inputs and attributes' if like_reference else 'forward inputs and attributes'}"))
    names = [a.name for a in spec.alternative_semantics]
    for name in sorted({n for n in names if names.count(n) > 1 or n in BUILTIN_TRANSFORMS}):
        out.append(("alternative_semantics", f"the name '{name}' is used twice (built-ins: {', '.join(BUILTIN_TRANSFORMS)}); "
                                             "a diagnosis must say which one matched"))
    return out


def _check_cases(spec: Spec, in_names, out_names, fwd_in) -> list[tuple[str, str]]:
    out = []
    allowed_types = set(spec.type_constraints[spec.inputs[0].type].types) if spec.inputs[0].type in spec.type_constraints else set()
    known_params = [*BUILTIN_PARAMS, *spec.attributes, *spec.cases.params]
    generator_names = set(in_names) | set(fwd_in)
    for where, dtypes_ in [("cases.dtypes", spec.cases.dtypes)]:
        for d in dtypes_:
            if allowed_types and d not in allowed_types:
                out.append((where, f"{d} is not allowed by the type constraint ({', '.join(sorted(allowed_types))})"))
    for name in spec.cases.inputs:
        if name not in generator_names:
            out.append((f"cases.inputs.{name}", unknown_name("input", name, sorted(generator_names))))

    groups = [("groups", g) for g in spec.cases.groups] + [("invalid", g) for g in spec.cases.invalid]
    seen = set()
    for index, (kind, group) in enumerate(groups):
        where = f"cases.{kind}[{index if kind == 'groups' else index - len(spec.cases.groups)}]"
        if group.name in seen:
            out.append((f"{where}.name", f"group name '{group.name}' is used twice"))
        seen.add(group.name)
        for d in group.dtypes or []:
            if allowed_types and d not in allowed_types:
                out.append((f"{where}.dtypes", f"{d} is not allowed by the type constraint ({', '.join(sorted(allowed_types))})"))
        for name in group.inputs:
            if name not in generator_names:
                out.append((f"{where}.inputs.{name}", unknown_name("input", name, sorted(generator_names))))
        for params in group_params(group):
            for key, value in params.items():
                if key not in known_params:
                    out.append((f"{where}.params.{key}", unknown_name("case parameter", key, known_params)
                                + "; declare hook parameters under cases.params"))
                elif key in spec.attributes and kind == "groups" and (problem := value_problem(spec.attributes[key], value)):
                    out.append((f"{where}.params.{key}", f"{problem} (out-of-range values belong in cases.invalid)"))
                elif key == OMIT and any(n not in in_names or not spec.input(n).optional for n in value):
                    out.append((f"{where}.params.{key}", f"only optional inputs can be omitted, got {value}"))
                elif key == OUTPUTS and any(n not in out_names for n in value):
                    out.append((f"{where}.params.{key}", f"unknown output in {value}; outputs are {', '.join(out_names)}"))
            if SHAPE not in params and not spec.cases.shapes and not any(i.shape_fn for i in spec.inputs):
                out.append((f"{where}.params", "no `shape` param: add `shape: [[...], ...]` or a cases.shapes hook"))
                break
        if kind == "invalid":
            for name in group.shapes:
                if name not in in_names:
                    out.append((f"{where}.shapes.{name}", unknown_name("input", name, in_names)))
            for name in group.attributes:
                if name not in spec.attributes:
                    out.append((f"{where}.attributes.{name}", unknown_name("attribute", name, spec.attributes)))

    ids = [c.id for c in expand(spec)]
    for index, d in enumerate(spec.known_divergences):
        where = f"known_divergences[{index}]"
        if d.backend not in BACKEND_NAMES:
            out.append((f"{where}.backend", unknown_name("backend", d.backend, BACKEND_NAMES)))
        for pattern in d.cases:
            if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
                out.append((f"{where}.cases", f"'{pattern}' matches no case id; ids look like '{ids[0] if ids else 'group/param=value'}'"))
        for name in d.outputs or []:
            if name not in out_names:
                out.append((f"{where}.outputs", unknown_name("output", name, out_names)))
    for pattern in spec.own_saved_state.cases if spec.own_saved_state else []:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in ids):
            out.append(("own_saved_state.cases", f"'{pattern}' matches no case id; ids look like '{ids[0] if ids else 'group/param=value'}'"))
    return out
