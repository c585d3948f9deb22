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

from harness.spec.unfinished import missing_items

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


def new_op(root: Path, name: str, like: str | None = None, domain: str = "com.microsoft") -> Scaffolded:
    """Write specs/<domain>/<name>.yaml and reference/ops/<snake>.py beside root; never overwrite."""
    from harness.core.spec_loader import load_spec, read_yaml

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
            from harness.core.spec_checks import unknown_name
            known = sorted(p.stem for p in root.glob("*/*.yaml") if not p.parent.name.startswith("_"))
            raise ScaffoldError(f"--like: {unknown_name('op', like, known)}")
        base, problems = load_spec(candidates[0])
        if base is None:
            raise ScaffoldError(f"--like {like}: {candidates[0]} does not validate ({problems[0]})")
        data, _ = read_yaml(candidates[0])
        text = _like_text(data, base, name, domain, dotted)
        inputs = [i.name for i in base.inputs]
        attributes = list(base.attributes)
        outputs = [o.name for o in base.outputs]
    else:
        text = _render("new_op.yaml.j2", op=name, domain=domain, reference=dotted)
        inputs, attributes, outputs = ["dY", "X"], [], ["dX"]

    signature = ", ".join(inputs) + (", *, " + ", ".join(attributes) if attributes else "")
    returns = ("Return " + (outputs[0] if len(outputs) == 1 else f"({', '.join(outputs)})")
               + " in float64" + (" (None for an output the op does not compute)" if len(outputs) > 1 else "") + ".")
    stub = _render("reference_stub.py.j2", op=name, domain=domain, function=module, signature=signature,
                   returns=returns, path=f"reference/ops/{module}.py")
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(text)
    ref_path.write_text(stub)
    return Scaffolded(spec_path, ref_path, missing_items(yaml.safe_load(text)))


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
