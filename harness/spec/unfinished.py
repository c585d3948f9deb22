"""What validation reports while a spec from `opconform new-op` is being filled in: each value still
marked TODO and each reference that only raises NotImplementedError, as "still missing", one item a
line. The spec loader calls these; harness.codegen.scaffold writes what they look for.
"""
from __future__ import annotations

import ast
import inspect
import textwrap

from harness.spec.dotted import DottedError, resolve

TODO = "TODO"


def missing_items(data, path: str = "") -> list[tuple[str, str]]:
    """(field, "still missing: ...") for every string value that still starts with TODO."""
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            out += missing_items(value, f"{path}.{key}" if path else str(key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += missing_items(value, f"{path}[{index}]")
    elif isinstance(data, str) and data.strip().startswith(TODO):
        hint = data.strip()[len(TODO):].lstrip(":").strip()
        out.append((path, "still missing" + (f": {hint}" if hint else "")))
    return out


def is_stub(fn) -> bool:
    """True for a function whose whole body (after its docstring) is `raise NotImplementedError...`."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    node = tree.body[0] if tree.body else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def stub_problems(spec) -> list[tuple[str, str]]:
    """References that are still the scaffold's stub."""
    out = []
    hooks = {"reference": spec.reference, "forward.reference": spec.forward.reference if spec.forward else None}
    for where, path in hooks.items():
        try:
            fn = resolve(path) if path else None
        except DottedError:
            continue  # the cross-field checks report an unresolvable path
        if fn is not None and is_stub(fn):
            out.append((where, f"still missing: {path} only raises NotImplementedError; write the float64 "
                               f"NumPy reference (docs/adding-an-op.md)"))
    return out
