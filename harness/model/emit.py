"""Configurations as spec case groups: one group per configuration, in `<domain>/<Op>.overlay.yaml` files (a team's
spec directory), or into the spec files themselves (--into-specs: the built-in specs' real-model groups, which
`tools/model_cases.py` regenerates, in a marked block at the end of `cases.groups`, so that the spec's
known_divergences may name them).

A group reads `{name: <model>_<k>, description: where it came from, dtypes: [..], params: {config: [{...}]},
export: {...}}`: one case whose params rebuild the node, the exporter's dynamic axes and constants for ort-autograd.
Writing into an existing overlay replaces the groups of the same model (by name prefix) and keeps every other.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from harness.spec.sources import OVERLAY_SUFFIX

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CI_ELEMENTS = 60_000  # a configuration whose inputs hold more elements than this runs in the nightly tier only
ELEMENTS = "x-elements"  # the group's input size, kept while the tiers are chosen (never written)


def group_prefix(model_name: str) -> str:
    prefix = re.sub(r"[^a-z0-9]+", "_", model_name.lower()).strip("_") or "model"
    return prefix if prefix[0].isalpha() else f"m_{prefix}"


def elements(config) -> int:
    total = 0
    for shape in config.node.shapes.values():
        if shape is not None:
            size = 1
            for d in shape:
                size *= int(d)
            total += size
    return total


def export_of(config) -> dict:
    export: dict = {}
    axes = {name: {int(a): (n if isinstance(n, str) and IDENT.match(n) else None) for a, n in dims.items()}
            for name, dims in config.dynamic_axes.items()}
    if axes:
        export["dynamic_axes"] = axes
    if config.kind == "forward":
        if config.constants:
            export["constants"] = list(config.constants)
        if config.opset and 1 <= config.opset <= 21:
            export["opset"] = int(config.opset)
    return export


def describe(model_name: str, config, limit: int = 3) -> str:
    nodes = config.nodes
    shown = ", ".join(nodes[:limit]) + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")
    what = "gradient node" if config.kind == "kernel" else f"gradient node of {config.op}"
    return f"{model_name}: {len(nodes)} {what}{'s' if len(nodes) != 1 else ''} ({shown})"


def group_for(model_name: str, name: str, config, params: dict, dtype: str, tier: str | None = None,
              inputs: dict | None = None) -> dict:
    group: dict = {"name": name, "description": describe(model_name, config), ELEMENTS: elements(config)}
    group["tier"] = tier or ("ci" if elements(config) <= CI_ELEMENTS else "nightly")
    group["dtypes"] = [dtype]
    group["params"] = {"config": [_plain(params)]}
    if inputs:
        group["inputs"] = _plain(inputs)
    export = export_of(config)
    if export:
        group["export"] = export
    return group


def tiered(groups: list[dict]) -> list[dict]:
    """Emitted groups of one op and model: the smallest configuration (within CI_ELEMENTS) runs in the ci tier, the
    others nightly, so that a model adds one case per op to the gate however many layers it has."""
    small = [g for g in groups if g.get(ELEMENTS, 0) <= CI_ELEMENTS]
    first = min(small, key=lambda g: g[ELEMENTS]) if small else None
    return [{**{k: v for k, v in g.items() if k != ELEMENTS}, "tier": "ci" if g is first else "nightly"}
            for g in groups]


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value


def write_overlays(root: Path, groups: dict[tuple[str, str], list[dict]], prefix: str) -> list[Path]:
    """root/<domain>/<Op>.overlay.yaml for each (domain, op): the model's groups replace its earlier ones."""
    written = []
    for (domain, op), new in sorted(groups.items()):
        path = root / (domain or "ai.onnx") / f"{op}{OVERLAY_SUFFIX}"
        kept: list[dict] = []
        if path.is_file():
            old = yaml.safe_load(path.read_text()) or {}
            kept = [g for g in old.get("groups", []) if not re.match(rf"^{re.escape(prefix)}_\d+$", g.get("name", ""))]
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"extends": op, "groups": [*kept, *({k: v for k, v in g.items() if k != ELEMENTS} for g in new)]}
        header = ("# Case groups of real models' gradient configurations, written by `opconform model --emit-cases`;\n"
                  "# each group names the model and the nodes it came from. Regenerate rather than edit.\n")
        path.write_text(header + yaml.safe_dump(body, sort_keys=False, width=120, default_flow_style=None))
        written.append(path)
    return written


SPEC_CI_GROUPS = 2  # real-model groups per spec in the ci tier (the first models' smallest); the rest run nightly
BLOCK_BEGIN = ("    # real models' configurations: written by `opconform model --emit-cases DIR --into-specs` "
               "(tools/model_cases.py); regenerate, do not edit")
BLOCK_END = "    # end of real models' configurations"


class EmitError(Exception):
    pass


def _groups_end(lines: list[str]) -> int:
    """The index of the first line after the `cases.groups` list (block style, items at 4 spaces)."""
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "cases:"), None)
    if start is None:
        raise EmitError("no `cases:` section at the start of a line")
    groups = next((i for i in range(start + 1, len(lines)) if lines[i].rstrip() == "  groups:"), None)
    if groups is None:
        raise EmitError("no block-style `  groups:` under `cases:`")
    for i in range(groups + 1, len(lines)):
        text = lines[i]
        if text.strip() and not text.lstrip().startswith("#") and len(text) - len(text.lstrip()) <= 2:
            return i
    return len(lines)


def write_into_specs(root: Path, groups: dict[tuple[str, str], list[dict]], prefix: str) -> list[Path]:
    """Each op's spec file root/<domain>/<Op>.yaml gets the groups in its real-models block (the model's earlier
    groups there replaced, other models' kept)."""
    written = []
    for (domain, op), new in sorted(groups.items()):
        path = root / (domain or "ai.onnx") / f"{op}.yaml"
        if not path.is_file():
            raise EmitError(f"{path}: no such spec file (--into-specs writes into the specs of the directory given)")
        lines = path.read_text().splitlines()
        if BLOCK_BEGIN in lines:
            begin, end = lines.index(BLOCK_BEGIN), lines.index(BLOCK_END)
            old = yaml.safe_load("\n".join(line[4:] for line in lines[begin + 1:end])) or []
            del lines[begin:end + 1]
            at = begin
        else:
            old, at = [], _groups_end(lines)
        kept = [g for g in old if not re.match(rf"^{re.escape(prefix)}_\d+$", g.get("name", ""))]
        merged = [*kept, *({k: v for k, v in g.items() if k != ELEMENTS} for g in new)]
        ci = [g for g in merged if g.get("tier") == "ci"]
        for g in ci[SPEC_CI_GROUPS:]:  # the gate's budget: a few real configurations per op, the rest nightly
            g["tier"] = "nightly"
        body = yaml.safe_dump(merged, sort_keys=False, width=120, default_flow_style=None).splitlines()
        lines[at:at] = [BLOCK_BEGIN, *("    " + line for line in body), BLOCK_END]
        path.write_text("\n".join(lines) + "\n")
        written.append(path)
    return written
