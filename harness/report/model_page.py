"""The model report of `opconform model` (harness/model/command.py): one self-contained HTML page in the
run report's style (its template environment, stylesheet and script, harness/report/render.py) showing how
many of a real model's gradient nodes and configurations are verified, failed, divergent (with the spec's
evidence) or uncovered, each configuration with its rerun command. Reads model.json's document only."""
from __future__ import annotations

import shlex
from functools import lru_cache
from pathlib import Path

import yaml

from harness.report.render import assets, environment
from harness.report.status import css
from harness.spec.sources import builtin_root

# The model's configuration statuses (command.py _groups/_run), worst first: the table's order.
ORDER = ("failed", "divergent", "not run", "pending", "uncovered", "verified")
HEADLINE = ("verified", "failed", "divergent", "uncovered")
# Each configuration status in the report's status colours (report.css .st-*).
CSS = {"verified": "st-pass", "failed": "st-fail", "divergent": "st-divergent", "uncovered": "st-unsupported"}


def status_css(status: str) -> str:
    return CSS.get(status, "st-other")


def _rank(status: str) -> int:
    return ORDER.index(status) if status in ORDER else ORDER.index("pending")


def _dims(shape) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _value(v) -> str:
    """An attribute's value as written: floats to float32's 7 digits (an ONNX attribute is float32)."""
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, float):
        return repr(float(f"{v:.7g}"))
    if isinstance(v, list):
        shown = ", ".join(_value(x) for x in v[:16])
        return "[" + shown + (f", … ({len(v)} values)]" if len(v) > 16 else "]")
    return str(v)


@lru_cache(maxsize=64)
def _declared(domain: str, spec: str) -> dict:
    """The built-in spec's known divergences by id (for a record that names one by id): best effort."""
    try:
        text = (builtin_root() / domain / f"{spec}.yaml").read_text(encoding="utf-8")
        found = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError):
        return {}
    return {d["id"]: d for d in found.get("known_divergences") or [] if isinstance(d, dict) and "id" in d}


def _divergences(row: dict) -> list[dict]:
    """The row's divergences as dicts (id, backend, summary, evidence, links): a record's divergence is its
    declaration's id (the spec is read for the evidence) or the declaration itself; each once."""
    out, seen = [], set()
    for d in row.get("divergences") or []:
        if isinstance(d, str):
            d = _declared(row.get("domain") or "ai.onnx", row.get("spec") or "").get(d, {"id": d})
        if not isinstance(d, dict):
            continue
        key = d.get("id") or repr(sorted(d.items(), key=str))
        if key in seen:
            continue
        seen.add(key)
        out.append({"id": d.get("id", ""), "backend": d.get("backend", ""), "summary": d.get("summary", ""),
                    "evidence": d.get("evidence", ""), "links": list(d.get("links") or [])})
    return out


def _row(row: dict) -> dict:
    shapes, dtypes = row.get("shapes") or {}, row.get("dtypes") or {}
    dynamic = row.get("dynamic_axes") or {}
    tensors = [{"name": name, "dtype": dtypes.get(name, ""), "dims": _dims(shape),
                "dynamic": ", ".join(f"{a}: {n}" for a, n in (dynamic.get(name) or {}).items())}
               for name, shape in shapes.items()]
    nodes = list(row.get("nodes") or [])
    return {"status": row.get("status", "pending"), "spec": row.get("spec", ""), "domain": row.get("domain") or "ai.onnx",
            "kind": row.get("kind", ""), "op": row.get("op", ""), "nodes": nodes, "layers": list(row.get("layers") or []),
            "tensors": tensors, "outputs": list(row.get("outputs") or []),
            "attributes": [(k, _value(v)) for k, v in (row.get("attributes") or {}).items()],
            "backends": sorted((row.get("backends") or {}).items()), "reason": row.get("reason") or "",
            "divergences": _divergences(row), "known": list(row.get("known") or []), "rerun": row.get("rerun"),
            "group": row.get("group"), "tier": row.get("tier")}


def _census_command(doc: dict) -> str:
    """The command that writes this report again."""
    argv = ["opconform", "model", str(doc.get("source", ""))]
    for name, size in (doc.get("dims") or {}).items():
        argv += ["--dim", f"{name}={size}"]
    if doc.get("kind") == "forward" and doc.get("loss"):
        argv += ["--loss", str(doc["loss"])]
    if doc.get("out"):
        argv += ["--out", str(doc["out"])]
    return shlex.join(argv)


def page_model(doc: dict) -> dict:
    """What the template shows, from model.json's document (fields absent from an older or failed run default)."""
    rows = sorted((_row(r) for r in doc.get("configurations") or []), key=lambda r: (_rank(r["status"]), r["spec"], -len(r["nodes"])))
    uncovered = sorted(({"op": u.get("op", ""), "domain": u.get("domain", ""), "reason": u.get("reason", ""),
                         "nodes": list(u.get("nodes") or [])} for u in doc.get("uncovered") or []),
                       key=lambda u: (-len(u["nodes"]), u["domain"], u["op"]))
    statuses = [*HEADLINE, *sorted({r["status"] for r in rows} - set(HEADLINE), key=_rank)]
    counts = {s: {"configurations": sum(1 for r in rows if r["status"] == s),
                  "nodes": sum(len(r["nodes"]) for r in rows if r["status"] == s)} for s in statuses}
    no_spec = sum(len(u["nodes"]) for u in uncovered)
    counts["uncovered"]["nodes"] += no_spec  # a node without a spec is uncovered too (command.py totals)
    error = doc.get("error")
    verdict = doc.get("verdict") or ("FAIL" if error else None)
    return {"model": doc.get("model", ""), "source": doc.get("source", ""), "kind": doc.get("kind", ""),
            "dims": doc.get("dims") or {}, "loss": doc.get("loss"), "error": error, "verdict": verdict,
            "graph_nodes": doc.get("graph_nodes"), "gradient_nodes": doc.get("gradient_nodes"), "opset": doc.get("opset"),
            "seconds": doc.get("seconds"), "out": doc.get("out"), "rows": rows, "uncovered": uncovered, "statuses": statuses,
            "counts": counts, "no_spec_nodes": no_spec, "census": _census_command(doc),
            "nodes_total": sum(len(r["nodes"]) for r in rows) + no_spec}


def render_model_page(doc: dict) -> str:
    css_text, js_text = assets()
    return environment().get_template("model.html.j2").render(
        m=page_model(doc), css_text=css_text, js_text=js_text, status_css=status_css, record_css=css)


def write_model_page(doc: dict, path: Path) -> Path:
    path = Path(path)
    path.write_text(render_model_page(doc), encoding="utf-8")
    return path
