"""docs/spec-fields.md: every field of the spec model (harness.spec.model) with its type, default,
description and an example, rendered from the pydantic model so that the page cannot drift from it.
`opconform gen-docs --check` exits 1 when the committed page differs from a fresh rendering."""
from __future__ import annotations

import json
import types
import typing
from pathlib import Path

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from harness.spec import model

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "spec-fields.md"

HEADER = """# Spec fields

Generated from `harness/spec/model.py` by `opconform gen-docs`; do not edit by hand (`opconform gen-docs
--check` fails the gate when this page is stale). docs/adding-an-op.md walks through writing a spec.

Case parameters with a meaning of their own (harness/core/cases.py), usable in any group's `params`:

- `shape`: the shape of every input without a shape rule, e.g. `shape: [[2, 3], [4]]`.
- `omit`: optional inputs left out of the node, e.g. `omit: [[], [B]]` (an empty list gives them all).
- `outputs`: the outputs the node asks for (the others are left unnamed), e.g. `outputs: [[dX], [dX, dW]]`;
  leave it out for all outputs.
- a type variable other than the case dtype's: the dtype of its inputs, e.g. `Tind: [int32, int64]` (default: its
  first type).
- any attribute of the op (written on the node), any forward-only attribute (`forward.own_attributes`), and
  any hook parameter declared under `cases.params`.
"""


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args]
        if set(names) >= {"Generator", "MaskGenerator"}:
            return "Generator \\| MaskGenerator \\| LabelsGenerator \\| IndicesGenerator \\| ShapeOfGenerator (by `kind`)"
        return " \\| ".join(names)
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args if a is not Ellipsis)}]"
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _models() -> list[type[BaseModel]]:
    """Every section model reachable from Spec, in the order a spec reads."""
    seen: list[type[BaseModel]] = []

    def visit(annotation):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen:
                seen.append(annotation)
                for f in annotation.model_fields.values():
                    visit(f.annotation)
            return
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(model.Spec)
    return seen


def _inline(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def render() -> str:
    lines = [HEADER]
    for section in _models():
        lines.append(f"## {section.__name__}\n")
        if section.__doc__ and section.__doc__ is not BaseModel.__doc__:
            lines.append(" ".join(section.__doc__.split()) + "\n")
        lines.append("| field | type | default | description | example |")
        lines.append("|---|---|---|---|---|")
        for name, f in section.model_fields.items():
            if f.is_required():
                default = "required"
            elif f.default is PydanticUndefined:
                default = ""
            else:
                default = f"`{_inline(f.default)}`"
            example = f"`{name}: {_inline(f.examples[0])}`" if f.examples else ""
            description = (f.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | {_type_name(f.annotation)} | {default} | {description} | {example} |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def stale(path: Path = DEFAULT_PATH) -> bool:
    return not path.exists() or path.read_text() != render()


def write(path: Path = DEFAULT_PATH) -> bool:
    """Write the page; True when it changed."""
    text = render()
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True
