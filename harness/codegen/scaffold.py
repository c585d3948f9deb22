"""`opconform new-op`: a spec with the fields to fill marked TODO, and a reference stub.

The spec lands in specs/<domain>/<Op>.yaml and names the stub, reference/ops/<snake_name>.py, by its
dotted path, which is how the harness finds every reference. Until the op is written up, validation
reports each TODO value and each reference that only raises NotImplementedError as "still missing",
one item a line (harness.spec.unfinished: missing_items, stub_problems, called by the spec loader).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.core.spec_loader import load_spec, read_yaml
from harness.spec.names import unknown_name
from harness.spec.unfinished import missing_items
from harness.spec.vocabulary import DTYPES, FLOAT_DTYPES

TEMPLATES = Path(__file__).parent / "templates"


class ScaffoldError(ValueError):
    """A request new-op cannot fulfil (a name taken, an unknown --like op); one line."""


# ---- what validation reports while a scaffolded spec is being filled in: harness.spec.unfinished

# ---- new-op ---------------------------------------------------------------------------------

@dataclass
class Scaffolded:
    spec: Path
    reference: Path
    todo: list[tuple[str, str]]


def snake(name: str) -> str:
    """SoftmaxGrad_13 -> softmax_grad_13, BiasGeluGrad_dX -> bias_gelu_grad_dx."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"_+", "_", words).lower()


def _render(template: str, **values) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, autoescape=False)
    return env.get_template(template).render(**values)


def new_op(root: Path, name: str, like: str | None = None, domain: str = "com.microsoft",
           signature: "Signature | None" = None) -> Scaffolded:
    """Write specs/<domain>/<name>.yaml and reference/ops/<snake>.py beside root; never overwrite.
    signature: the inputs, outputs, attributes and types to scaffold (Signature.from_names /
    from_schema); default dY, X -> dX, like ReluGrad."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ScaffoldError(f"'{name}' is not an op name: use letters, digits and _, e.g. SquareGrad")
    spec_path = root / domain / f"{name}.yaml"
    if spec_path.exists():
        raise ScaffoldError(f"{spec_path} already exists; edit it, or pick another name")
    ops_dir = root.resolve().parent / "reference" / "ops"
    if not ops_dir.is_dir():
        raise ScaffoldError(f"no reference/ops/ beside {root}: new-op writes the reference stub there")
    module = snake(name)
    ref_path = ops_dir / f"{module}.py"
    if ref_path.exists():
        raise ScaffoldError(f"{ref_path} already exists; choose another op name or move that module")
    dotted = f"reference.ops.{module}:{module}"

    if like:
        candidates = sorted(root.glob(f"*/{like}.yaml"))
        if not candidates:
            known = sorted(p.stem for p in root.glob("*/*.yaml") if not p.parent.name.startswith("_"))
            raise ScaffoldError(f"--like: {unknown_name('op', like, known)}")
        base, problems = load_spec(candidates[0])
        if base is None:
            raise ScaffoldError(f"--like {like}: {candidates[0]} does not validate ({problems[0]})")
        data, _ = read_yaml(candidates[0])
        if not isinstance(data, dict):  # load_spec read the same file as a mapping just now
            raise ScaffoldError(f"--like {like}: {candidates[0]} changed while it was read; try again")
        text = _like_text(data, base, name, domain, dotted)
        inputs = [i.name for i in base.inputs]
        attributes = list(base.attributes)
        outputs = [o.name for o in base.outputs]
    else:
        sig = signature or Signature.default()
        text = _render("new_op.yaml.j2", op=name, domain=domain, reference=dotted, sig=sig)
        inputs, attributes, outputs = [i["name"] for i in sig.inputs], list(sig.attributes), [o["name"] for o in sig.outputs]

    parameters = ", ".join(inputs) + (", *, " + ", ".join(attributes) if attributes else "")
    returns = ("Return " + (outputs[0] if len(outputs) == 1 else f"({', '.join(outputs)})")
               + " in float64" + (" (None for an output the op does not compute)" if len(outputs) > 1 else "") + ".")
    stub = _render("reference_stub.py.j2", op=name, domain=domain, function=module, signature=parameters,
                   returns=returns, path=f"reference/ops/{module}.py")
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(text)
    ref_path.write_text(stub)
    return Scaffolded(spec_path, ref_path, missing_items(yaml.safe_load(text)))


FLOAT_TYPES = list(FLOAT_DTYPES)
SPEC_DTYPES = set(DTYPES)
ROLE_GUESS = "role guessed from the name (d*/*_grad: grad_output, others: forward_input); check it"
# A shape rule new-op does not guess: validate lists it as still missing until it is written.
SHAPE_TODO = ("TODO: the input whose shape {name} has (or replace shape_from with shape_fn: module:function, or "
              "shape: [...]); not guessed, {name} need not have {shaper}'s shape")


def _is_grad(name: str) -> bool:
    return bool(re.match(r"d[A-Z0-9_]|d[a-z]$", name)) or name.endswith("_grad")


def _grad_of(name: str) -> str:
    return name[:-len("_grad")] if name.endswith("_grad") else name[1:]


@dataclass
class Signature:
    """What new-op scaffolds: type constraints, inputs, outputs (dicts with name, type, option,
    comment) and attributes (name -> {type, default | required}), plus header notes."""
    type_constraints: dict
    inputs: list
    outputs: list
    attributes: dict
    origin: str = "a gradient op taking the incoming gradient and the forward op's input, like ReluGrad"
    notes: tuple = ()
    dtypes: tuple = ()           # the cases' dtypes: the first input's float types
    forward_inputs: tuple = ()
    forward_outputs: tuple = ()
    guessed: bool = True         # roles and shapes guessed from names: say so in comments
    computation: bool = False    # --forward: a computation the gradient graph runs (Scale, FusedMatMul), no forward op

    @classmethod
    def default(cls) -> "Signature":
        sig = cls._build({"T": FLOAT_TYPES}, [{"name": "dY", "type": "T"}, {"name": "X", "type": "T"}],
                         [{"name": "dX", "type": "T"}], {}, guessed=False)
        sig.inputs[1]["generator"] = "{distribution: normal, std: 2.0}"
        return sig

    @classmethod
    def default_computation(cls) -> "Signature":
        """new-op --forward: one input X, one output Y of its shape, like Scale's tensor part."""
        return cls._build({"T": FLOAT_TYPES}, [{"name": "X", "type": "T"}], [{"name": "Y", "type": "T"}], {},
                          origin="a computation the gradient graph runs (no forward op to differentiate), "
                                 "like Scale", guessed=False, computation=True)

    @classmethod
    def from_names(cls, inputs: list[str], outputs: list[str], computation: bool = False) -> "Signature":
        for name in inputs + outputs:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ScaffoldError(f"'{name}' is not an input or output name: use letters, digits and _")
        if not inputs or not outputs:
            raise ScaffoldError("--inputs and --outputs each need at least one name, e.g. --inputs dY,X --outputs dX")
        return cls._build({"T": FLOAT_TYPES}, [{"name": n, "type": "T"} for n in inputs],
                          [{"name": n, "type": "T"} for n in outputs], {},
                          origin=f"inputs {', '.join(inputs)}; outputs {', '.join(outputs)} (from --inputs/--outputs)",
                          computation=computation)

    @classmethod
    def from_schema(cls, entry: dict, computation: bool = False) -> "Signature":
        """From a harness/data/ort_training_ops.yaml entry: names, order, optionality, types, attributes."""
        constraints, notes = {}, []

        def type_var(formal: dict) -> str:
            t = formal["type"]
            types = entry["type_constraints"].get(t, [t])
            if any(x.startswith("seq(") for x in types) or formal.get("option") == "variadic":
                raise ScaffoldError(f"{entry['op']}: {formal['name']} is a sequence or variadic; the spec format has "
                                    "one tensor per input, so scaffold with --inputs/--outputs and adapt")
            name = t if t in entry["type_constraints"] else f"T_{formal['name']}"
            kept = [x for x in types if x in SPEC_DTYPES]
            if not kept:
                kept = FLOAT_TYPES
                notes.append(f"TODO: {name} is {types[0]} in the schema; scaffolded as the float types")
            constraints[name] = kept
            return name

        inputs = [dict(f, type=type_var(f)) for f in entry["inputs"]]
        outputs = [dict(f, type=type_var(f)) for f in entry["outputs"]]
        attributes = {}
        for attr_name, attr in entry["attributes"].items():
            if attr["type"] == "tensor":
                notes.append(f"TODO: attribute {attr_name} is a tensor; the spec format has no tensor attributes")
                continue
            attributes[attr_name] = attr
        if entry.get("allow_unchecked_attributes"):
            notes.append("The schema allows unchecked attributes: declare any the kernel reads besides these.")
        if entry.get("names_verified") is False:
            notes.append("TODO: the table's input/output names are not verified (ORT binds by position)")
        domain = entry["domain"] or "ai.onnx"
        return cls._build(constraints, inputs, outputs, attributes,
                          origin=f"from the schema of {domain} {entry['op']} (harness/data/ort_training_ops.yaml)",
                          notes=notes, computation=computation)

    @classmethod
    def _build(cls, constraints, inputs, outputs, attributes, origin=None, notes=(), guessed=True, computation=False):
        names = [i["name"] for i in inputs]
        floats = [i for i in inputs if set(constraints[i["type"]]) & set(FLOAT_TYPES)]
        grads = [] if computation else [i for i in floats if _is_grad(i["name"])]
        shaper = (grads or floats or inputs)[0]["name"]  # takes the group's `shape` param
        # The documented default, an elementwise gradient (one incoming gradient dY and one forward input X of
        # its shape), is the one shape guess made; with more inputs (a matmul's A and B), or roles the names do
        # not tell, each other input's shape rule is left TODO for validate to list, never guessed.
        elementwise = len(inputs) == 2 and len(grads) == 1 and len(floats) == 2
        for i in inputs:
            # a computation's inputs are all its own (no incoming gradient); forward_input is the role for them
            role = "grad_output" if _is_grad(i["name"]) and not computation else "forward_input"
            fields = {"name": i["name"], "type": i["type"], "role": role}
            if role == "grad_output":
                fields["grad_of"] = _grad_of(i["name"])
            if i.get("option") == "optional":
                fields["optional"] = True
            if i["name"] != shaper:
                fields["shape_from"] = shaper if elementwise else SHAPE_TODO.format(name=i["name"], shaper=shaper)
            fields["description"] = ("The op's input." if computation and not guessed
                                     else _description(i["name"], role, guessed))
            i["line"] = _flow(fields)
            guess = f"; shape_from {shaper} is a guess" if i["name"] != shaper and elementwise else ""
            i["comment"] = ROLE_GUESS + guess if guessed and not computation else ""
            i["generator"] = _generator(constraints[i["type"]])
        for o in outputs:
            # dX -> X, dscale -> scale, X_grad -> X: the input it is the gradient of, when there is one
            wrt = next((w for w in (o["name"][1:], o["name"].removesuffix("_grad")) if w != o["name"] and w in names),
                       o["name"]) if not computation else o["name"]
            fields = {"name": o["name"], "type": o["type"]}
            if o.get("option") == "optional":
                fields["optional"] = True
            # the gradient of an input has that input's shape; any other output's rule is left TODO
            if computation and len(inputs) == 1:
                fields["shape_from"] = shaper  # one input, one output: an elementwise computation, the one guess
            else:
                fields["shape_from"] = wrt if wrt in names else SHAPE_TODO.format(name=o["name"], shaper=shaper)
            if wrt in names:
                fields["grad_of"] = wrt
            fields["description"] = (f"Gradient of the loss with respect to {wrt}." if wrt in names
                                     else "The result." if computation and not guessed else "TODO: what this output is")
            o["line"] = _flow(fields)
            o["comment"] = ""
        main = constraints[inputs[0]["type"]]
        dtypes = [t for t in FLOAT_TYPES if t in main] or FLOAT_TYPES
        forward_inputs = [i["name"] for i in inputs if not _is_grad(i["name"])]
        forward_outputs = [_grad_of(i["name"]) for i in grads] or ["Y"]
        sig = cls(constraints, inputs, outputs, {k: _flow(v) for k, v in attributes.items()}, notes=tuple(notes),
                  dtypes=tuple(dtypes), forward_inputs=tuple(forward_inputs),
                  forward_outputs=tuple(forward_outputs), guessed=guessed, computation=computation)
        if origin:
            sig.origin = origin
        return sig


def _description(name: str, role: str, guessed: bool) -> str:
    if not guessed:
        return ("Gradient of the loss with respect to the forward output Y." if role == "grad_output"
                else "The forward op's input.")
    if role == "grad_output":
        return f"Gradient of the loss with respect to the forward output {_grad_of(name)}."
    return "TODO: what this input is"


def _generator(types: list[str]) -> str:
    if set(types) & set(FLOAT_TYPES):
        return "{distribution: normal, std: 1.0}"
    if types == ["bool"]:
        return "{kind: mask, keep: 0.5}"
    return "{kind: indices, range: [0, 2]}  # TODO: the valid values (indices, labels, or literal values)"


def _flow(fields: dict) -> str:
    """One YAML flow mapping on one line, the style the specs use."""
    return yaml.safe_dump(fields, default_flow_style=True, sort_keys=False, width=10_000).strip()


def _like_text(data: dict, base, name: str, domain: str, dotted: str) -> str:
    """A copy of another op's spec with what describes that op reset to TODO."""
    copy = dict(data)
    copy.update(op=name, domain=domain, since_version=1,
                summary=f"TODO: one line: what {name} computes ({base.op} says: {base.summary})",
                description="",
                formula=f"TODO: the math ({base.op}'s is: {base.formula})",
                references=[f"TODO: where {name} is defined (copied from {base.op}: {', '.join(base.references) or 'none'})"],
                reference=dotted)
    if base.forward is not None:
        forward = dict(copy["forward"])
        forward["op"] = f"TODO: the forward op's name ({base.op}'s is {base.forward.op})"
        forward["reference"] = (f"TODO: module.path:function of the forward op's float64 reference "
                                f"({base.op}'s is {base.forward.reference})")
        copy["forward"] = forward
    dropped = [key for key in ("known_divergences", "alternative_semantics") if key in copy]
    for key in dropped:
        del copy[key]
    header = [f"# Scaffolded by `opconform new-op {name} --like {base.op}`: a copy of {base.op}'s spec.",
              "# Replace every TODO and check every other field against the new op (inputs, attributes, cases);",
              "# `opconform validate` lists what is still missing, one item a line (docs/adding-an-op.md)."]
    if dropped:
        header.append(f"# Not copied: {', '.join(dropped)} (they are evidence about {base.op}, not about {name}).")
    body = yaml.safe_dump(copy, sort_keys=False, default_flow_style=None, width=110, allow_unicode=True)
    return "\n".join(header) + "\n" + body
