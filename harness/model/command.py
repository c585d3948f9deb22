"""`opconform model PATH`: a real model's gradient nodes, each distinct configuration run through its spec.

PATH is a forward ONNX model (its training graph is built with onnxruntime-training's generate_artifacts, as a
user would), a training-artifacts directory (its training_model.onnx) or a training graph file. The command writes
into OUT (default reports/model-<name>-<time>/):
  training/            the built artifacts (forward models only)
  specs/               <domain>/<Op>.overlay.yaml: one case group per configuration, `model_<k>`
  run/                 the run of those groups on every expected backend (a run directory, `opconform report` reads it)
  model.json           the census and each configuration's verdict
  model.html           the model report
Exit status as `run`: 0 every covered configuration verified (or a declared divergence), 1 a configuration failed
or the builder refused the model, 2 bad usage.
"""
from __future__ import annotations

import datetime
import fnmatch
import importlib.util
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from harness.core.cases import group_params
from harness.core.status import EXPLAINS, SEVERITY, UNEXPECTED
from harness.model import emit
from harness.model.build import NEEDS_TORCH, BuildError, build
from harness.model.census import Census, CensusError, Tensor, census, declared_shapes
from harness.model.graph_run import DimsError, run_graph
from harness.model.match import match
from harness.report.model_page import write_model_page
from harness.run.rundir import read_results
from harness.run.runner import RunOptions, print_summary
from harness.run.runner import run as run_cases

RUN_PREFIX = "model"
ARTIFACT_FILE = "training_model.onnx"


class ModelUsageError(Exception):
    pass


@dataclass
class Source:
    kind: str          # forward | artifacts | training_graph
    path: Path
    training: Path | None = None


def parse_dims(items: list[str]) -> dict[str, int]:
    dims = {}
    for item in items:
        name, sep, size = item.partition("=")
        if not sep or not name.strip() or not size.strip().isdigit() or int(size) < 1:
            raise ModelUsageError(f"--dim {item}: write NAME=SIZE with a positive size, e.g. --dim batch=8")
        dims[name.strip()] = int(size)
    return dims


def is_training_graph(model: onnx.ModelProto) -> bool:
    return any("_Grad/" in n.name or (n.domain == "com.microsoft" and n.op_type.endswith("Grad")) for n in model.graph.node)


def classify(path: Path) -> Source:
    if path.is_dir():
        graph = path / ARTIFACT_FILE
        if not graph.is_file():
            raise ModelUsageError(f"{path}: a directory must hold training artifacts ({ARTIFACT_FILE}); none there")
        return Source("artifacts", path, graph)
    if not path.is_file():
        raise ModelUsageError(f"{path}: no such file or directory")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - any parse failure is the user's file: say so on one line
        raise ModelUsageError(f"{path}: not an ONNX model ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    if is_training_graph(model):
        return Source("training_graph", path, path)
    return Source("forward", path)


def _tensors(table: dict, declared: dict) -> dict[str, Tensor]:
    return {name: Tensor(e["dtype"], tuple(e["shape"]), declared.get(name),
                         None if "value" not in e else np.asarray(e["value"], dtype=e["dtype"]))
            for name, e in table.items()}


def model_name(path: Path) -> str:
    return path.name if path.is_dir() else path.stem


def run_model(args, catalog_loader, log) -> int:
    """The command; `catalog_loader(extra_dirs)` loads the spec catalog with extra --specs directories on top."""
    started = time.time()
    path = Path(args.path)
    dims = parse_dims(args.dim or [])
    source = classify(path)
    name = args.name or model_name(path)
    out = Path(args.out) if args.out else Path("reports") / f"model-{emit.group_prefix(name)}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"model": name, "source": str(path), "kind": source.kind, "dims": dims, "out": str(out),
                 "loss": args.loss if source.kind == "forward" else None, "configurations": [], "uncovered": [],
                 "totals": {}}
    listing = bool(getattr(args, "list", False))
    if source.kind == "forward":
        if importlib.util.find_spec("torch") is None:  # the environment's, not the model's: a usage error
            raise ModelUsageError(NEEDS_TORCH)
        log(f"building the training graph of {path} with generate_artifacts (loss {args.loss})...")
        try:
            source.training = build(path, out / "training", args.loss, args.frozen or [], args.timeout * 4)
        except BuildError as e:
            return _finish(doc, out, f"the training graph could not be built: {e}", started, failed=True,
                           listing=listing)
    assert source.training is not None
    graph = onnx.load(str(source.training))
    log(f"running the training graph once ({len(graph.graph.node)} nodes) to read every tensor's shape...")
    try:
        table, doc["graph_crash"] = run_graph(source.training, dims, out / "tensors.json", args.timeout * 4, log)
    except DimsError as e:
        raise ModelUsageError(str(e)) from None
    except CensusError as e:
        return _finish(doc, out, str(e), started, failed=True, listing=listing)
    tensors = _tensors(table, declared_shapes(graph))
    catalog = catalog_loader([])
    specs = catalog.select(None)
    found = census(graph, tensors, specs, dims)
    doc["graph_nodes"], doc["gradient_nodes"], doc["opset"] = found.graph_nodes, len(found.gradient_nodes), found.opset
    doc["node_ops"] = found.ops
    groups, rows = _groups(found, specs, name, crashed=bool(doc["graph_crash"]))
    doc["configurations"] = rows
    doc["uncovered"] = [{"op": u.op, "domain": u.domain, "reason": u.reason, "nodes": u.nodes} for u in found.uncovered]
    log(f"{len(found.gradient_nodes)} gradient-side nodes: {len(found.configurations)} configurations of "
        f"{len({c.spec for c in found.configurations})} specs, {sum(len(u.nodes) for u in found.uncovered)} nodes without a spec")
    if args.emit_cases:
        prefix = emit.group_prefix(name)
        emitted = {key: emit.tiered([dict(g, name=f"{prefix}_{g['name'].split('_')[-1]}") for g in value])
                   for key, value in groups.items()}
        writer = emit.write_into_specs if getattr(args, "into_specs", False) else emit.write_overlays
        try:
            for written in writer(Path(args.emit_cases), emitted, prefix):
                log(f"wrote {written}")
        except emit.EmitError as e:
            raise ModelUsageError(f"--emit-cases {args.emit_cases}: {e}") from None
    if not args.no_run and groups:
        specs_dir = out / "specs"
        emit.write_overlays(specs_dir, groups, RUN_PREFIX)
        _run(args, catalog_loader, specs_dir, out / "run", sorted({op for _, op in groups}), rows, log)
    failed = any(r["status"] == "failed" for r in rows) or bool(doc["graph_crash"])
    return _finish(doc, out, doc["graph_crash"], started, failed=failed, listing=listing)


def _groups(found: Census, specs, name: str, crashed: bool = False):
    by_op = {s.op: s for s in specs}
    groups: dict[tuple[str, str], list[dict]] = {}
    rows = []
    counters: dict[str, int] = {}
    for config in found.configurations:
        spec = by_op[config.spec]
        row = {"spec": spec.op, "domain": spec.domain or "ai.onnx", "kind": config.kind, "op": config.op,
               "nodes": config.nodes, "layers": config.layers, "attributes": emit._plain(config.node.attributes),
               "shapes": {k: (None if v is None else list(v)) for k, v in config.node.shapes.items()},
               "dtypes": config.node.dtypes, "outputs": list(config.node.outputs),
               "dynamic_axes": {k: {str(a): n for a, n in v.items()} for k, v in config.dynamic_axes.items()},
               "group": None, "status": "uncovered", "reason": "", "backends": {}, "divergences": [], "rerun": None}
        found_match = match(spec, config.node)
        if config.mismatch:  # ORT's own graph is wrong here, whatever the kernel does with it
            row["status"], row["reason"] = "failed", config.mismatch
        elif found_match.params is None:
            unknown = [i.name for i in spec.inputs if not i.optional and config.node.shapes.get(i.name) is None]
            row["reason"] = (f"the shapes of {', '.join(unknown)} are unknown: ORT could not run the whole training "
                             "step, and they are tensors of its gradient computation" if crashed and unknown
                             else found_match.why)
        else:
            counters[spec.op] = counters.get(spec.op, 0) + 1
            group_name = f"{RUN_PREFIX}_{counters[spec.op]:03d}"
            group = emit.group_for(name, group_name, config, found_match.params, found_match.dtype, inputs=found_match.inputs)
            groups.setdefault((spec.domain or "ai.onnx", spec.op), []).append(group)
            row.update(group=group_name, status="pending", params=group["params"]["config"][0],
                       export=group.get("export"), tier=group["tier"], same_as=same_group(spec, group))
        rows.append(row)
    return groups, rows


def _plain_json(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def same_group(spec, group: dict) -> str | None:
    """The spec's own group whose one case is exactly this configuration (a built-in real-model group: the same
    params, dtype, export and input generators), whose declared divergences then apply to it."""
    want = (_plain_json(group["params"]["config"][0]), group["dtypes"], _plain_json(group.get("export")),
            _plain_json(group.get("inputs") or {}))
    for own in spec.cases.groups:
        combos = group_params(own)
        if len(combos) != 1 or (own.dtypes or spec.cases.dtypes) != group["dtypes"]:
            continue
        export = own.export.model_dump(exclude_defaults=True) if own.export else None
        inputs = {k: v.model_dump(exclude_defaults=True) for k, v in own.inputs.items()}
        if (_plain_json(combos[0]), group["dtypes"], _plain_json(export), _plain_json(inputs)) == want:
            return own.name
    return None


def _run(args, catalog_loader, specs_dir: Path, run_dir: Path, ops: list[str], rows: list[dict], log) -> None:
    catalog = catalog_loader([specs_dir])
    options = RunOptions(ops=ops, backends=args.backends, tier="nightly", cases=f"{RUN_PREFIX}_*", threads=args.threads,
                         timeout=args.timeout, out=run_dir, progress=args.progress,
                         allow_missing_backends=args.allow_missing_backends)
    outcome = run_cases(catalog, options)
    print("the model's configurations, each run as a case group of its spec:")
    print_summary(outcome)
    print()
    records = [r for r in read_results(run_dir) if r.get("group", "").startswith(RUN_PREFIX + "_")]
    specs = {s.op: s for s in catalog.specs}
    extra = "".join(f" --specs {d}" for d in (args.specs or []))
    for row in rows:
        if row["group"] is None:
            continue
        mine = [r for r in records if r["op"] == row["spec"] and r["group"] == row["group"]]
        row["rerun"] = (f"opconform run --specs {specs_dir}{extra} --ops {row['spec']} --cases '{row['group']}/*' "
                        f"--tier nightly")
        judge(row, mine, specs.get(row["spec"]))


def judge(row: dict, mine: list[dict], spec) -> None:
    """A configuration's status from its records: failed when any backend's record is unexpected (fail, crashed,
    error; with the spec's declared divergences of that backend and kind as hints), else divergent or waived when
    any is, else verified when a backend passed, else not run."""
    row["backends"] = {}
    for r in mine:  # a backend's worst record (a case may have several checks)
        before = row["backends"].get(r["backend"])
        if before is None or _rank(r["status"]) > _rank(before):
            row["backends"][r["backend"]] = r["status"]
    statuses = set(row["backends"].values())
    if not mine:
        row["status"], row["reason"] = "failed", "the run recorded no result for this configuration"
    elif statuses & set(UNEXPECTED) and (declared := _declared_for_same(row, mine, spec)):
        row["status"], row["divergences"] = "divergent", declared
        row["reason"] = (f"the same configuration as {row['spec']}'s own group {row['same_as']}, where the spec declares "
                         f"it: {', '.join(declared)}")
    elif statuses & set(UNEXPECTED):
        row["status"] = "failed"
        worst = [r for r in mine if r["status"] in UNEXPECTED]
        row["reason"] = "; ".join(f"{r['backend']}: {r['status']}" + _why(r) for r in worst)[:600]
        kinds = {(r["backend"], r.get("failure")) for r in worst}
        row["known"] = [{"id": d.id, "backend": d.backend, "summary": d.summary}
                        for d in (spec.known_divergences if spec else [])
                        if any(b == d.backend and any(f in EXPLAINS.get(res, ()) for res in d.results)
                               for b, f in kinds)]
    elif "divergent" in statuses or "waived" in statuses:
        row["status"] = "divergent" if "divergent" in statuses else "waived"
        row["divergences"] = [r["divergence"] for r in mine if r["status"] == "divergent" and r.get("divergence")]
    elif "pass" in statuses:
        row["status"] = "verified"
    else:
        row["status"], row["reason"] = "not run", "no backend ran it: " + ", ".join(f"{b}: {s}" for b, s in row["backends"].items())


def _declared_for_same(row: dict, mine: list[dict], spec) -> list[str]:
    """The ids of the spec's declared divergences that explain every unexpected record, read as the case of the
    spec's identical group (row["same_as"]); [] when there is none or one record stays unexplained."""
    if not row.get("same_as") or spec is None:
        return []
    found = []
    for r in (r for r in mine if r["status"] in UNEXPECTED):
        case = f"{row['same_as']}/{r['case'].split('/', 1)[1]}" if "/" in r["case"] else row["same_as"]
        match = next((d for d in spec.known_divergences if d.backend == r["backend"]
                      and (d.dtypes is None or r["dtype"] in d.dtypes)
                      and any(fnmatch.fnmatchcase(case, g) for g in d.cases)
                      and any(r.get("failure") in EXPLAINS.get(res, ()) for res in d.results)), None)
        if match is None:
            return []
        found.append(match.id)
    return sorted(set(found))


def _rank(status: str) -> int:
    """A backend's record that speaks for it: the most severe (harness.core.status.SEVERITY) of those that judged
    something, a pass over an unsupported one (a check it cannot run beside a case it passed)."""
    if status == "unsupported":
        return 0
    return len(SEVERITY) - SEVERITY.index(status) if status in SEVERITY else -1


def _why(record: dict) -> str:
    failure = record.get("failure") or record.get("detail") or ""
    text = failure if isinstance(failure, str) else json.dumps(failure)[:200]
    return f" ({text.splitlines()[0][:200]})" if text else ""


def _finish(doc: dict, out: Path, error: str | None, started: float, failed: bool, listing: bool = False) -> int:
    rows = doc["configurations"]
    totals = {status: sum(1 for r in rows if r["status"] == status) for status in
              ("verified", "failed", "divergent", "waived", "uncovered", "not run", "pending")}
    totals["nodes_verified"] = sum(len(r["nodes"]) for r in rows if r["status"] == "verified")
    totals["nodes_failed"] = sum(len(r["nodes"]) for r in rows if r["status"] == "failed")
    totals["nodes_divergent"] = sum(len(r["nodes"]) for r in rows if r["status"] == "divergent")
    totals["nodes_uncovered"] = (sum(len(r["nodes"]) for r in rows if r["status"] == "uncovered")
                                 + sum(len(u["nodes"]) for u in doc["uncovered"]))
    doc["totals"] = totals
    doc["error"] = error
    doc["seconds"] = round(time.time() - started, 1)
    doc["verdict"] = "FAIL" if failed or error else "PASS"
    (out / "model.json").write_text(json.dumps(doc, indent=1, default=str))
    page = None
    try:
        page = write_model_page(doc, out / "model.html")
    except Exception as e:  # noqa: BLE001 - the census is on disk; the page can be written again
        print(f"opconform: warning: could not write the model report: {type(e).__name__}: {e}", file=sys.stderr)
    if listing:
        print(listing_text(doc))
    print(summary_text(doc))
    print(f"model report: {page or out / 'model.json'}")
    return 1 if doc["verdict"] == "FAIL" else 0


def listing_text(doc: dict) -> str:
    """--list: every gradient-side node under the configuration it belongs to, with the op, domain, dtypes, shapes and
    attributes of that configuration; then the nodes no spec covers."""
    lines, ops = [], doc.get("node_ops", {})
    for k, row in enumerate(doc["configurations"], 1):
        shapes = ", ".join(f"{name} {row['dtypes'].get(name, '')}{list(shape)}" for name, shape in row["shapes"].items()
                           if shape is not None)
        attributes = ", ".join(f"{a}={v}" for a, v in row["attributes"].items())
        via = "" if row["kind"] == "kernel" else f" (the gradient of {row['op']})"
        lines.append(f"[{k}] {row['status']}: {row['domain']}::{row['spec']}{via}: {shapes}"
                     + (f"; {attributes}" if attributes else ""))
        lines.extend(f"      {node}  {ops.get(node, '')}" for node in row["nodes"])
    for u in doc["uncovered"]:
        lines.append(f"[-] no spec: {u['domain']}::{u['op']}: {u['reason']}")
        lines.extend(f"      {node}  {ops.get(node, '')}" for node in u["nodes"])
    return "\n".join(lines)


def summary_text(doc: dict) -> str:
    lines = []
    if doc.get("error"):
        lines.append(f"{doc['model']}: {doc['error']}")
    t = doc["totals"]
    if doc["configurations"] or doc["uncovered"]:
        lines.append(f"{doc['model']}: {doc.get('gradient_nodes', 0)} gradient-side nodes, "
                     f"{len(doc['configurations'])} configurations: "
                     + (f"{t['pending']} matched to their spec (--no-run: none run), " if t["pending"] else "")
                     + f"{t['verified']} verified, {t['failed']} failed, "
                     f"{t['divergent']} divergent, {t['uncovered']} outside their spec; "
                     f"{t['nodes_uncovered']} nodes uncovered")
        for row in doc["configurations"]:
            if row["status"] in ("failed", "uncovered", "not run"):
                lines.append(f"  {row['status']:<9} {row['spec']} ({len(row['nodes'])} node(s), e.g. {row['nodes'][0]}): "
                             f"{row['reason']}")
                if row.get("rerun"):
                    lines.append(f"            rerun: {row['rerun']}")
        for u in doc["uncovered"]:
            lines.append(f"  no spec   {u['domain']}::{u['op']} ({len(u['nodes'])} node(s)): {u['reason']}")
    lines.append(f"model verdict: {doc['verdict']}")
    return "\n".join(lines)
