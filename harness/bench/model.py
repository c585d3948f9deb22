"""`opconform bench --model`: a model's gradient-node configurations as bench workloads.

A model is either a workload list (JSON, schema opconform-bench-model/1: the distinct configurations of the model's
gradient nodes, configurations only, no weights) or an ONNX model / training graph / artifacts directory, whose
configurations `opconform model`'s census finds (harness.model.census, matched to their spec's case params by
harness.model.match). Lists of resnet18, mobilenet_v2, a BERT layer and an LSTM classifier ship in
harness/data/bench_models/ (written by tools/bench_models.py).

    {"schema": "opconform-bench-model/1", "model": "resnet18", "what": "...", "dims": {"batch": 2},
     "configurations": [{"op": "ConvGrad", "params": {...}, "dtype": "float32", "count": 4,
                         "inputs": {...} (optional: literal generators for the graph's constants),
                         "layers": ["/layer1/layer1.0/conv1/Conv", ...] (optional: the forward nodes)}]}

Each configuration becomes one Workload: the case its params make in its spec (as a bench size is one), timed by the
bench runner like every other workload; `count` is how many of the model's nodes share it, the weight of its time
in the per-model total.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench.workloads import Workload
from harness.core.bench_spec import BENCH_DTYPE, cost, torch_peer
from harness.core.cases import case_for
from harness.core.shapes import OUTPUTS, input_shapes

SCHEMA = "opconform-bench-model/1"
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "bench_models"


NOT_A_KERNEL = ("a training-graph gradient (the builder writes it as standard ONNX ops, no kernel of its own): "
                "no bench workload")


class ModelListError(ValueError):
    """A workload list that cannot be read (one line naming the file and the entry)."""


@dataclass(frozen=True)
class Entry:
    op: str
    params: dict[str, Any]
    count: int
    dtype: str = "float32"
    inputs: dict[str, Any] = field(default_factory=dict)
    layers: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelList:
    model: str
    entries: list[Entry]
    what: str = ""
    source: str = ""  # the file it was read from


def shipped() -> dict[str, Path]:
    """name -> file of every workload list that ships with the bench."""
    return {p.stem: p for p in sorted(SHIPPED_DIR.glob("*.json"))}


def _entry(where: str, k: int, raw: Any) -> Entry:
    label = f"{where}: configuration {k}"
    if not isinstance(raw, dict):
        raise ModelListError(f"{label}: an entry is a mapping with op, params and count, got {type(raw).__name__}")
    op = raw.get("op")
    label += f" ({op})" if isinstance(op, str) and op else ""
    if not isinstance(op, str) or not op:
        raise ModelListError(f"{label}: `op` must be an op name, got {op!r}")
    params = raw.get("params")
    if not isinstance(params, dict):
        raise ModelListError(f"{label}: `params` must be a mapping of case params, got {params!r}")
    count = raw.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ModelListError(f"{label}: `count` must be a positive integer (the model's nodes sharing it), got {count!r}")
    dtype = raw.get("dtype", "float32")
    if not isinstance(dtype, str):
        raise ModelListError(f"{label}: `dtype` must be a dtype name, got {dtype!r}")
    inputs = raw.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise ModelListError(f"{label}: `inputs` must be a mapping of input generators, got {inputs!r}")
    layers = raw.get("layers") or []
    if not isinstance(layers, list) or not all(isinstance(x, str) for x in layers):
        raise ModelListError(f"{label}: `layers` must be a list of node names, got {layers!r}")
    unknown = sorted(set(raw) - {"op", "params", "count", "dtype", "inputs", "layers"})
    if unknown:
        raise ModelListError(f"{label}: unknown field(s) {', '.join(unknown)} (op, params, count, dtype, inputs, layers)")
    return Entry(op, params, count, dtype, inputs, tuple(layers))


def parse_list(doc: Any, where: str) -> ModelList:
    """A workload list from its JSON document; ModelListError (one line, naming the entry) when malformed."""
    if not isinstance(doc, dict):
        raise ModelListError(f"{where}: a workload list is a JSON object with model and configurations")
    if doc.get("schema", SCHEMA) != SCHEMA:
        raise ModelListError(f"{where}: schema {doc.get('schema')!r}, expected {SCHEMA}")
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise ModelListError(f"{where}: `model` must name the model, got {model!r}")
    raw = doc.get("configurations")
    if not isinstance(raw, list) or not raw:
        raise ModelListError(f"{where}: `configurations` must be a non-empty list")
    entries = [_entry(where, k, e) for k, e in enumerate(raw, 1)]
    return ModelList(model, entries, str(doc.get("what", "")), where)


def load_list(path: Path) -> ModelList:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ModelListError(f"{path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ModelListError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse_list(doc, str(path))


def resolve_name(name: str) -> Path | None:
    """A shipped list's file by name, or a JSON list file by path; None when `name` is neither (a graph path, or
    unknown)."""
    lists = shipped()
    if name in lists:
        return lists[name]
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        return path
    return None


def unknown_model(name: str) -> str:
    return (f"--model {name}: no shipped workload list, JSON list or ONNX model/artifacts directory of that name; "
            f"shipped: {', '.join(shipped()) or '(none)'}")


# ----------------------------------------------------------------------------------------- configuration -> workload


def case_of(catalog, entry: Entry):
    """The case an entry's params make in its op's spec (float32, as bench sizes are drawn)."""
    spec = catalog.by_op(entry.op)
    return case_for(spec, bench_params(spec, entry.params), BENCH_DTYPE, name="bench_model",
                    inputs=dict(entry.inputs) or None)


def bench_params(spec, params: dict) -> dict:
    """The params a configuration is timed with: as the graph has it, except that a node naming only flag outputs
    (InPlaceAccumulatorV2's updated_flag: ORT accumulates into the buffer in place, which a functional kernel does only
    for accumulation_buffer_out) is timed with every output asked for, so that the work the model does is timed."""
    wanted = params.get(OUTPUTS)
    if not wanted:
        return dict(params)
    floats = {o.name for o in spec.outputs if o.type in spec.type_constraints
              and any(t.startswith(("float", "bfloat")) for t in spec.type_constraints[o.type].types)}
    if floats and not floats & set(wanted):
        return {k: v for k, v in params.items() if k != OUTPUTS}
    return dict(params)


def label(case, width: int = 60) -> str:
    """The configuration as the table shows it: its inputs' shapes and the attributes that differ from the spec's
    defaults."""
    spec = case.spec
    shapes = input_shapes(case)
    parts = ["x".join(map(str, s)) if s else "scalar" for i in spec.inputs
             if (s := shapes.get(i.name)) is not None and i.role in ("grad_output", "forward_input")][:3]
    attrs = []
    for name, value in case.node_attributes.items():
        default = getattr(spec.attributes.get(name), "default", None)
        if value != default and name not in ("auto_pad",):
            shown = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else value
            attrs.append(f"{name}={shown}")
    text = " ".join(parts) + ("; " + " ".join(attrs) if attrs else "")
    return text if len(text) <= width else text[: width - 3] + "..."


def entry_workload(catalog, model: str, k: int, entry: Entry) -> Workload:
    spec = catalog.by_op(entry.op)
    case = case_of(catalog, entry)
    flops = cost(spec, case, "flops") if spec.bench else None
    nbytes = cost(spec, case, "bytes") if spec.bench else None
    fixed = cost(spec, case, "fixed_bytes") if spec.bench else None
    def peer(inputs, spec=spec, case=case):
        return torch_peer(spec, case, inputs)

    return Workload(spec.op, f"{model}/{k}", label(case), case, dict(case.attributes),
                    bytes=None if nbytes is None else int(nbytes), fixed_bytes=int(fixed or 0),
                    flops=None if flops is None else float(flops),
                    torch=peer if spec.bench and spec.bench.torch else None, model=model, count=entry.count)


def model_workloads(catalog, listed: ModelList, ops: list[str] | None = None) -> list[Workload]:
    """One workload per configuration of the list (those of `ops`, globs, when given); ModelListError naming the entry
    whose op has no spec or whose params make no case."""
    import fnmatch

    known = set(catalog.all_ops)
    out = []
    for k, entry in enumerate(listed.entries, 1):
        if ops and not any(fnmatch.fnmatchcase(entry.op, p) for p in ops):
            continue
        where = f"{listed.source or listed.model}: configuration {k} ({entry.op})"
        if entry.op not in known:
            raise ModelListError(f"{where}: no spec for op {entry.op}")
        if catalog.by_op(entry.op).subject != "kernel":
            raise ModelListError(f"{where}: {NOT_A_KERNEL}")
        try:
            out.append(entry_workload(catalog, listed.model, k, entry))
        except ModelListError:
            raise
        except Exception as e:  # noqa: BLE001 - params that make no case: the list's error, one line
            raise ModelListError(f"{where}: its params make no case of the spec: {type(e).__name__}: {e}") from None
    return out


# ----------------------------------------------------------------------------------------- a graph's configurations


# ----------------------------------------------------------------------------------------- the per-model table


def per_model_totals(rows: list[dict], backends=("openmp", "ort", "torch")) -> dict:
    """{(model, isa, dtype): {"ms": {backend: count-weighted sum}, "missing": {backend: [configuration labels]},
    "nodes": n}}: each row's median times its count; a row a backend did not time is listed as missing for it."""
    totals: dict[tuple, dict] = {}
    for row in rows:
        if "model" not in row:
            continue
        key = (row["model"], row.get("isa", "-"), row.get("dtype", "float32"))
        t = totals.setdefault(key, {"ms": dict.fromkeys(backends, 0.0), "missing": {b: [] for b in backends},
                                    "nodes": 0, "rows": 0})
        t["nodes"] += row["count"]
        t["rows"] += 1
        for b in backends:
            s = row["median_s"].get(b)
            if s is None:
                t["missing"][b].append(row["size"])
            else:
                t["ms"][b] += s * 1e3 * row["count"]
    return totals


def _cell(row: dict, backend: str) -> str:
    s = row["median_s"].get(backend)
    return f"{s * 1e3:10.3f}" if s is not None else f"{'-':>10}"


def _ratio(row: dict, peer: str) -> str:
    a, b = row["median_s"].get("openmp"), row["median_s"].get(peer)
    return f"{a / b:6.2f}" if a and b else f"{'-':>6}"


def model_table(doc: dict, limit_text: Callable[[dict], str]) -> str:
    """The per-layer table of each model, ISA level and dtype, sorted by openmp's count-weighted time (the slowest
    first), and its per-model total line."""
    rows = [r for r in doc["results"] if "model" in r]
    if not rows:
        return ""
    lines = []
    totals = per_model_totals(rows)
    for (model, isa, dtype), t in totals.items():
        mine = [r for r in rows if (r["model"], r.get("isa", "-"), r.get("dtype", "float32")) == (model, isa, dtype)]
        mine.sort(key=lambda r: -next((r["median_s"][b] for b in ("openmp", "ort", "torch") if b in r["median_s"]), 0.0)
                  * r["count"])
        head = (f"{'#':>4} {'op':24s} {'configuration':60s} {'count':>5} {'openmp ms':>10} {'ort ms':>10} "
                f"{'torch ms':>10} {'/ort':>6} {'/torch':>6} {'x count ms':>10}  limit")
        lines += [f"{model} at isa {isa}, {dtype}, {doc['threads']} thread(s): {t['rows']} configurations of "
                  f"{t['nodes']} nodes, slowest (openmp time x count) first", head, "-" * len(head)]
        for r in mine:
            weighted = r["median_s"].get("openmp")
            weighted_ms = f"{weighted * 1e3 * r['count']:10.3f}" if weighted else f"{'-':>10}"
            lines.append(f"{r['size'].rsplit('/', 1)[-1]:>4} {r['op']:24s} {str(r['shape'])[:60]:60s} {r['count']:5d} "
                         f"{_cell(r, 'openmp')} {_cell(r, 'ort')} {_cell(r, 'torch')} {_ratio(r, 'ort')} "
                         f"{_ratio(r, 'torch')} "
                         f"{weighted_ms}  {limit_text(r)}")
        ms = t["ms"]
        total = (f"the gradient ops of this model's training step ({model}, isa {isa}, {dtype}, counts applied): "
                 f"openmp {ms['openmp']:.3f} ms, ORT {ms['ort']:.3f} ms, torch {ms['torch']:.3f} ms")
        lines.append(total)
        for b in ("openmp", "ort", "torch"):
            if t["missing"][b]:
                names = ", ".join(f"#{s.rsplit('/', 1)[-1]}" for s in t["missing"][b])
                lines.append(f"  {b}: no time for {names} ({len(t['missing'][b])} of {t['rows']} rows; its total "
                             f"leaves them out)")
        lines.append("")
    return "\n".join(lines)
