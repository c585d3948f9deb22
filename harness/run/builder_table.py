"""The builder table of `opconform inventory`: every forward op onnxruntime-training 1.19.2's gradient
builder differentiates, found by asking the builder itself, and the spec that covers each.

Probes (each in an isolated worker, harness.backends.builder_probe: a crash or hang is the probe's
result, never the end of the table):
- every default-domain op of onnx.defs, at each distinct since_version up to MAX_OPSET (ORT 1.19.2
  supports opset 21): a one-node model at that opset with every output, required inputs only (float
  ones [2, 3] graph inputs, differentiated; integer ones small constants), required attributes set to
  a placeholder, asked of GradientGraphBuilder starting from every float output;
- the com.microsoft forward ops of harness/data/builder_probes.yaml (ORT's Python lists no contrib
  schemas), each with the inputs the file gives;
- the ops users train through generate_artifacts' rewrites (BatchNormalization, LSTM, GRU: the builder
  itself registers none), probed through onnxruntime.training.artifacts.generate_artifacts.
Ops whose generic probe cannot be built right (shapes, constant inputs, attributes) get their inputs
from the file's `overrides`.

Each row with a gradient names the spec covering it or, from the probe file's `reasons:`, why none does
(`unexplained` lists the rows with neither; `reason_key_problems` the keys that name no probed op version).

Only whether the builder has a gradient definition is meaningful. The answers: `gradient` (it built a
gradient graph), `gradient, invalid graph` (it wrote gradient nodes the model's opset lacks: the graph
did not resolve), `no gradient` ("The gradient builder has not been registered"), `not differentiable`
(no float input or output, or the builder has an empty gradient for it), `probe failed: <reason>`
(another error: the probe's model is at fault) and `probe crashed: <reason>`.

Results are cached under $XDG_CACHE_HOME/opconform/builder-<key>.json, the key over onnxruntime's and
onnx's versions, this module's, the worker's and the probe file's bytes (harness.spec.cache's
directory rules and OPCONFORM_NO_CACHE apply).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from harness.backends.base import Crashed, TimedOut
from harness.backends.ort_autograd import short_message
from harness.backends.worker import HandlerError, IsolatedWorker
from harness.data import ort_training_ops
from harness.spec import cache

MAX_OPSET = 21  # the newest ai.onnx opset onnxruntime 1.19.2 supports
DEFAULT_OPSETS = {"": 17, "com.microsoft": 1}  # what a spec's forward op is built at without forward.opset
PROBES_FILE = Path(__file__).resolve().parents[1] / "data" / "builder_probes.yaml"
HANDLER = "harness.backends.builder_probe:handle"
ARTIFACTS_HANDLER = "harness.backends.builder_probe:handle_artifacts"
PRELOAD = ("harness.backends.builder_probe:preload",)
LOSS = "opconform_loss"
FORWARD = "forward"
FORMAT = 1

GRADIENT = "gradient"
GRADIENT_INVALID = "gradient, invalid graph"
GRADIENT_REFUSED = "gradient, builder refuses"
NO_GRADIENT = "no gradient"
NOT_DIFFERENTIABLE = "not differentiable"
FAILED = "probe failed"
CRASHED = "probe crashed"
HAS_GRADIENT = (GRADIENT, GRADIENT_INVALID, GRADIENT_REFUSED)
CELL = {GRADIENT: "yes", GRADIENT_INVALID: "invalid graph", GRADIENT_REFUSED: "builder throws"}

ONNX_TYPES = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7, "string": 8, "bool": 9, "float16": 10,
              "float64": 11}
TYPE_STR = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(bool)": "bool",
            "tensor(double)": "float64", "tensor(float16)": "float16", "tensor(uint8)": "uint8",
            "tensor(int8)": "int8", "tensor(string)": "string"}
PLACEHOLDER_ATTRS = {"INT": 1, "FLOAT": 0.5, "STRING": "", "INTS": [1], "FLOATS": [0.5], "STRINGS": [""]}
DEFAULT_SHAPE = [2, 3]


@dataclass
class Probe:
    domain: str          # '' for ai.onnx
    op: str
    since_version: int
    via: str = "builder"  # or generate_artifacts
    model: bytes = b""
    starts: list[str] = field(default_factory=list)
    wrt: list[str] = field(default_factory=list)
    answer: tuple[str, str] | None = None  # known without asking ORT (no float input or output)

    @property
    def key(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op}@{self.since_version}" + ("" if self.via == "builder" else f"/{self.via}")


@dataclass
class Row:
    domain: str           # ai.onnx or com.microsoft
    op: str
    since_version: int
    via: str
    status: str
    detail: str           # ORT's message, or the gradient nodes it wrote
    spec: str = ""        # the covering spec's id
    coverage: str = ""    # how the spec covers it, or why none does
    reason: str = ""      # the probe file's `reasons:` entry for this op version, when it has one

    @property
    def has_gradient(self) -> bool:
        return self.status in HAS_GRADIENT



def probe_file() -> dict:
    return yaml.safe_load(PROBES_FILE.read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the probes' models

def plan(only: list[str] | None = None) -> list[Probe]:
    """Every probe (those of the ops named in `only`, if given), default domain first."""
    import onnx.defs

    table = probe_file()
    overrides = table.get("overrides") or {}
    probes = []
    schemas = sorted((s for s in onnx.defs.get_all_schemas_with_history()
                      if s.domain == "" and s.since_version <= MAX_OPSET and not s.deprecated),
                     key=lambda s: (s.name, s.since_version))
    for schema in schemas:
        if only and schema.name not in only:
            continue
        override = {**(overrides.get(schema.name) or {}), **(overrides.get(f"{schema.name}@{schema.since_version}") or {})}
        probes.append(schema_probe(schema, override))
    for entry in table.get("ort_ops") or []:
        if not only or entry["op"] in only:
            probes.append(explicit_probe(entry.get("domain", "com.microsoft"), entry))
    for entry in table.get("rewrites") or []:
        if not only or entry["op"] in only:
            probes.append(explicit_probe("", entry, via="generate_artifacts"))
    return probes


def schema_probe(schema, override: dict) -> Probe:
    """The one-node model of an onnx schema, at its since_version, with `override`'s inputs and attributes."""
    from onnx import defs

    probe = Probe("", schema.name, schema.since_version)
    given = override.get("inputs") or {}
    constraints = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    inputs: list[tuple[str, Any]] = []
    for formal in schema.inputs:
        optional = formal.option == defs.OpSchema.FormalParameterOption.Optional
        spec = given.get(formal.name, "omit" if optional else None)
        if spec == "omit":
            inputs.append((formal.name, None))
            continue
        types = constraints.get(formal.type_str, [formal.type_str])
        if spec is None:
            spec = _generic_input(types)
            if spec is None:
                probe.answer = (FAILED, f"input {formal.name} takes {', '.join(types[:3])}: no tensor feed for it")
                return probe
        if formal.option == defs.OpSchema.FormalParameterOption.Variadic:
            count = override.get("variadic", 2)
            inputs += [(f"{formal.name}_{i}", spec) for i in range(count)]
        else:
            inputs.append((formal.name, spec))
    outputs = list(override.get("outputs") or [])
    for formal in [] if outputs else schema.outputs:
        if formal.option == defs.OpSchema.FormalParameterOption.Variadic:
            outputs += [f"{formal.name}_{i}" for i in range(override.get("variadic_outputs", 2))]
        else:
            outputs.append(formal.name)
    attributes = {name: PLACEHOLDER_ATTRS.get(attr.type.name) for name, attr in schema.attributes.items()
                  if attr.required and attr.type.name in PLACEHOLDER_ATTRS}
    attributes.update({k: v for k, v in (override.get("attributes") or {}).items() if k in schema.attributes})
    return _finish(probe, inputs, outputs, attributes, override)


def explicit_probe(domain: str, entry: dict, via: str = "builder") -> Probe:
    """A probe whose inputs, outputs and attributes the probe file gives in full."""
    probe = Probe(domain, entry["op"], entry.get("since_version", 1), via)
    inputs = [(name, None if spec == "omit" else spec) for name, spec in (entry.get("inputs") or {}).items()]
    return _finish(probe, inputs, list(entry["outputs"]), entry.get("attributes") or {}, entry)


def _generic_input(types: list[str]) -> Any:
    dtypes = [TYPE_STR[t] for t in types if t in TYPE_STR]
    if "float32" in dtypes:
        return list(DEFAULT_SHAPE)
    if "int64" in dtypes:
        return {"dtype": "int64", "value": [0]}
    if dtypes:
        return {"dtype": dtypes[0], "shape": list(DEFAULT_SHAPE)}
    return None


def _finish(probe: Probe, inputs: list[tuple[str, Any]], outputs: list[str], attributes: dict,
            entry: dict) -> Probe:
    """Builds the model: float inputs are graph inputs, differentiated (unless `wrt: false`), constants
    are initializers; every output; a loss that sums the first float output (never differentiated)."""
    from onnx import helper, numpy_helper

    graph_inputs, initializers, node_inputs, wrt = [], [], [], []
    for name, spec in inputs:
        if spec is None:
            node_inputs.append("")
            continue
        if isinstance(spec, list):
            spec = {"shape": spec}
        dtype = spec.get("dtype", "float32")
        arg = f"in_{name}"
        node_inputs.append(arg)
        if "fill" in spec:
            spec = {**spec, "value": np.full(spec["shape"], spec["fill"]).tolist()}
        if "value" in spec:
            value = np.array(spec["value"], dtype=dtype if dtype != "float32" else np.float32)
            if "shape" in spec:
                value = value.reshape(spec["shape"])
            initializers.append(numpy_helper.from_array(value, arg))
            if spec.get("wrt", False):
                wrt.append(arg)
            continue
        graph_inputs.append(helper.make_tensor_value_info(arg, ONNX_TYPES[dtype], spec.get("shape", DEFAULT_SHAPE)))
        if spec.get("wrt", dtype == "float32"):
            wrt.append(arg)
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    out_args = [f"out_{o}" for o in outputs]
    attributes = {k: v for k, v in attributes.items() if v is not None}
    node = helper.make_node(probe.op, node_inputs, out_args, name=FORWARD, domain=probe.domain, **attributes)
    floats = entry.get("starts")
    opsets = [helper.make_opsetid("", probe.since_version if probe.domain == "" else DEFAULT_OPSETS[""])]
    if probe.domain or entry.get("contrib_opset"):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    inferred = _inferred_outputs(probe, node, graph_inputs, initializers, opsets)
    if floats is None:  # the float32 outputs, by onnx's shape inference; every output where it cannot tell
        floats = [o for o in out_args if inferred.get(o, (1, None))[0] in (0, 1)]
    else:
        floats = [f"out_{o}" for o in floats]
    if not wrt and probe.via == "builder":
        probe.answer = (NOT_DIFFERENTIABLE, "no float input")
        return probe
    if not floats:
        probe.answer = (NOT_DIFFERENTIABLE, "no float output")
        return probe
    if probe.via == "generate_artifacts":  # the forward's outputs are the model's; MSE loss on the first
        outputs_info = [helper.make_tensor_value_info(o, 1, inferred.get(o, (1, None))[1]) for o in floats[:1]]
        graph = helper.make_graph([node], probe.op, graph_inputs, outputs_info, initializers)
        model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
        probe.model, probe.wrt = model.SerializeToString(), [i.name for i in initializers if i.name in wrt]
        return probe
    loss = helper.make_node("ReduceSum", [floats[0]], [LOSS], name="opconform_loss", keepdims=0)
    graph = helper.make_graph([node, loss], probe.op, graph_inputs,
                              [helper.make_tensor_value_info(LOSS, 1, [])], initializers)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    probe.model, probe.starts, probe.wrt = model.SerializeToString(), floats, wrt
    return probe


def _inferred_outputs(probe, node, graph_inputs, initializers, opsets) -> dict[str, tuple[int, list | None]]:
    """output -> (ONNX element type, shape) by onnx's shape inference, for the outputs it infers."""
    import onnx
    from onnx import helper

    graph = helper.make_graph([node], probe.op, graph_inputs, [], initializers)
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - no inference: let the builder tell
        return {}
    out = {}
    for v in inferred.graph.value_info:
        t = v.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim] if t.HasField("shape") else None
        out[v.name] = (t.elem_type, None if dims is None or None in dims else dims)
    return out


# ---------------------------------------------------------------- asking ORT

def classify(reply) -> tuple[str, str]:
    """(status, detail) of a worker's reply to one probe."""
    if isinstance(reply, Crashed):
        return CRASHED, f"{CRASHED}: {reply}"[:300]
    if isinstance(reply, TimedOut):
        return CRASHED, f"{CRASHED}: timed out: {reply}"
    if isinstance(reply, HandlerError):
        return FAILED, f"{FAILED}: {reply}"[:300]
    if reply.get("ok"):
        return GRADIENT, "writes " + (", ".join(dict.fromkeys(reply["nodes"])) or "no node")
    message = _short(reply["message"])
    if "gradient builder has not been registered" in message:
        return NO_GRADIENT, message
    if "is not a registered function/op" in message:
        return NO_GRADIENT, f"no such op in this build: {message}"
    if "unreachable from the output" in message or "not differentiable" in message.lower():
        return NOT_DIFFERENTIABLE, message
    if "invalid model" in message and "_Grad/" in message:  # a node the builder wrote does not resolve
        return GRADIENT_INVALID, message
    if "gradient_builder" in message or "_Map_base::at" in message:  # the op's builder ran and threw
        return GRADIENT_REFUSED, message
    return FAILED, f"{FAILED}: {message}"


def _short(message: str) -> str:
    return short_message(message)[:300]


class Prober:
    """The probe workers: the builder's (torch kept out) and generate_artifacts' (torch loaded), each
    started on first use."""

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout
        self._workers: dict[str, IsolatedWorker] = {}

    def worker(self, handler: str) -> IsolatedWorker:
        if handler not in self._workers:
            self._workers[handler] = IsolatedWorker(handler, self.timeout, preload=PRELOAD if handler == HANDLER else ())
        return self._workers[handler]

    def ask(self, probe: Probe) -> tuple[str, str]:
        if probe.answer is not None:
            return probe.answer
        if probe.via == "generate_artifacts":
            request = {"call": "artifacts", "model": probe.model, "requires_grad": probe.wrt}
            handler = ARTIFACTS_HANDLER
        else:
            request = {"call": "build", "model": probe.model, "starts": probe.starts, "wrt": probe.wrt,
                       "loss": LOSS, "forward_nodes": [FORWARD, "opconform_loss"]}
            handler = HANDLER
        try:
            reply = self.worker(handler).call(request)
        except HandlerError as e:
            reply = e
        status, detail = classify(reply)
        if probe.via == "generate_artifacts" and status == GRADIENT:
            detail = detail.replace("writes ", "training model holds ", 1)
        return status, detail

    def close(self) -> None:
        for w in self._workers.values():
            w.close()


# ---------------------------------------------------------------- the cache

def cache_key() -> str:
    import onnx

    try:
        from importlib.metadata import version
        ort = version("onnxruntime-training")
    except Exception:  # noqa: BLE001 - another onnxruntime build: its own key
        ort = "unknown"
    h = hashlib.sha256(f"format {FORMAT} onnxruntime-training {ort} onnx {onnx.__version__}".encode())
    for path in (Path(__file__), PROBES_FILE, Path(__file__).resolve().parents[1] / "backends" / "builder_probe.py"):
        h.update(path.read_bytes())
    return h.hexdigest()[:24]


def cache_file() -> Path | None:
    if not cache.enabled():
        return None
    return cache.directory().parent / f"builder-{cache_key()}.json"


def _load_cache(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _save_cache(path: Path | None, results: dict) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".builder-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(results, f)
        os.replace(tmp, path)
    except OSError:
        pass


def probe_all(probes: list[Probe], prober: Prober | None = None, progress: Callable[[str], None] | None = None,
              use_cache: bool = True) -> dict[str, tuple[str, str]]:
    """probe key -> (status, detail), from the cache where it has them, else asked of ORT."""
    path = cache_file() if use_cache else None
    cached = _load_cache(path)
    results: dict[str, tuple[str, str]] = {}
    missing = [p for p in probes if p.key not in cached]
    own = prober is None and bool(missing)
    prober = prober or (Prober() if missing else None)
    try:
        for i, probe in enumerate(missing, 1):
            if progress:
                progress(f"builder probe {i}/{len(missing)}: {probe.key}")
            cached[probe.key] = list(prober.ask(probe))  # type: ignore[union-attr]
    finally:
        if own and prober is not None:
            prober.close()
    if missing:
        _save_cache(path, cached)
    for probe in probes:
        status, detail = cached[probe.key]
        results[probe.key] = (status, detail)
    return results


# ---------------------------------------------------------------- coverage

def _form(domain: str, op: str, version: int):
    """What a spec of one version of the op shares with another: input, output and attribute names."""
    import onnx.defs

    if domain != "":
        return None
    try:
        s = onnx.defs.get_schema(op, version, "")
    except Exception:  # noqa: BLE001
        return None
    return (tuple(i.name for i in s.inputs), tuple(o.name for o in s.outputs), tuple(sorted(s.attributes)))


def _version_at(domain: str, op: str, opset: int) -> int:
    import onnx.defs

    if domain != "":
        return 1
    try:
        return onnx.defs.get_schema(op, opset, "").since_version
    except Exception:  # noqa: BLE001 - ORT's own default-domain op: its training op table's version, else 1
        entry = ort_training_ops().get(op)  # SparseSoftmaxCrossEntropy: 9; SimplifiedLayerNormalization: absent
        return entry["since_version"] if entry and entry.get("domain") == "" and entry["since_version"] <= opset else 1


def forward_specs(specs) -> dict[tuple[str, str], list[tuple[int, str]]]:
    """(domain, forward op) -> [(the forward op's since_version the spec builds, spec id)], from every
    spec with a forward op: kernel specs (ReluGrad: Relu) and training-graph specs (MulGradient: Mul)."""
    index: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for spec in specs:
        forward = getattr(spec, "forward", None)
        if forward is None:
            continue
        domain = forward.domain or ""
        opsets = {forward.opset or DEFAULT_OPSETS.get(domain, 1)}
        # groups built as an exporter writes them at another opset (export.opset) cover that version too
        groups = spec.cases.groups if getattr(spec, "cases", None) is not None else []
        opsets |= {g.export.opset for g in groups if g.export is not None and g.export.opset is not None}
        for version in sorted({_version_at(domain, forward.op, opset) for opset in opsets}):
            index.setdefault((domain, forward.op), []).append((version, spec.id))
    for entries in index.values():
        entries.sort()
    return index


def coverage(row_domain: str, op: str, version: int, index: dict, table: dict) -> tuple[str, str]:
    """(spec id, how it covers the row) or ('', why none does)."""
    domain = "" if row_domain == "ai.onnx" else row_domain
    rewrite = next((r for r in table.get("rewrites") or [] if r["op"] == op and row_domain == "ai.onnx"), None)
    if rewrite is not None:  # BatchNormalization -> BatchNormInternal: the rewritten op's spec covers it
        domain, op, version = rewrite["rewritten"].get("domain", ""), rewrite["rewritten"]["op"], 1
    entries = index.get((domain, op), [])
    exact = [sid for v, sid in entries if v == version]
    note = f" (rewritten to {domain + '.' if domain else ''}{op})" if rewrite else ""
    if exact:
        return ", ".join(exact), "forward op at this version" + note
    form = _form(domain, op, version)
    same = [(v, sid) for v, sid in entries if form is not None and _form(domain, op, v) == form]
    if same:
        v, sid = same[-1]
        return sid, f"same inputs, outputs and attributes as opset {v}, which the spec builds"
    reason = reason_for(row_domain, op, version, table)
    if reason:  # it names the spec of the other form itself
        return "", reason
    if entries:
        others = ", ".join(f"{sid} (opset {v})" for v, sid in entries)
        return "", f"no spec of this form; {others} covers another"
    return "", "no spec yet"


def _reason_key(key: str) -> tuple[str, str, list[int] | None]:
    """'domain::Op' -> (domain, Op, None); 'domain::Op@1,6' -> (domain, Op, [1, 6])."""
    domain, _, rest = key.partition("::")
    op, _, versions = rest.partition("@")
    return domain, op, [int(v) for v in versions.split(",")] if versions else None


def reason_for(row_domain: str, op: str, version: int, table: dict) -> str:
    """The probe file's reason why no spec covers this op version: a key naming the version
    (`domain::Op@v` or `domain::Op@v1,v2`) first, else one naming the op."""
    general = ""
    for key, text in (table.get("reasons") or {}).items():
        domain, name, versions = _reason_key(key)
        if (domain, name) != (row_domain, op):
            continue
        if versions is None:
            general = general or " ".join(str(text).split())
        elif version in versions:
            return " ".join(str(text).split())
    return general


def reason_key_problems(table: dict, probes: list[Probe]) -> list[str]:
    """`reasons:` keys that name no probed op version (a typo, or an op the table no longer lists)."""
    probed = {((p.domain or "ai.onnx"), p.op, p.since_version) for p in probes}
    problems = []
    for key, text in (table.get("reasons") or {}).items():
        domain, op, versions = _reason_key(key)
        if not str(text or "").strip() or "\n" in str(text).strip():
            problems.append(f"{key}: a reason is one non-empty line")
        known = {v for d, o, v in probed if (d, o) == (domain, op)}
        if not known:
            problems.append(f"{key}: no probe of {domain}::{op}")
        elif versions is not None and not set(versions) <= known:
            problems.append(f"{key}: {domain}::{op} has no version {sorted(set(versions) - known)} "
                            f"(probed: {sorted(known)})")
    return problems


def unexplained(table_rows: list[Row]) -> list[Row]:
    """Op versions with a gradient that neither a spec covers nor a reason explains."""
    return [r for r in gradient_rows(table_rows) if not r.spec and not r.reason]


def stale_reasons(table_rows: list[Row], table: dict) -> list[str]:
    """`reasons:` keys every row of which now has a spec (the reason no longer applies), among the
    ops of these rows."""
    stale = []
    for key in table.get("reasons") or {}:
        domain, op, versions = _reason_key(key)
        rows_ = [r for r in gradient_rows(table_rows) if (r.domain, r.op) == (domain, op)
                 and (versions is None or r.since_version in versions)]
        if rows_ and all(r.spec for r in rows_):
            stale.append(key)
    return stale


# ---------------------------------------------------------------- the table

def rows(specs, only: list[str] | None = None, prober: Prober | None = None,
         progress: Callable[[str], None] | None = None, use_cache: bool = True) -> list[Row]:
    """One Row per probe: every (op, since_version) of the default domain, every contrib op of the probe
    file, every rewrite; the covering spec of those with a gradient."""
    probes = plan(only)
    answers = probe_all(probes, prober, progress, use_cache)
    index, table = forward_specs(specs), probe_file()
    result = []
    for probe in probes:
        status, detail = answers[probe.key]
        domain = probe.domain or "ai.onnx"
        row = Row(domain, probe.op, probe.since_version, probe.via, status, detail)
        if row.status == GRADIENT:
            row.spec, row.coverage = coverage(domain, probe.op, probe.since_version, index, table)
        elif row.has_gradient:  # only a spec of this very version runs it
            spec, how = coverage(domain, probe.op, probe.since_version, index, table)
            exact = how.startswith("forward op at this version")
            row.spec = spec if exact else ""
            row.coverage = how if exact else (
                "the builder writes an invalid graph at this opset" if status == GRADIENT_INVALID
                else "the builder throws on this valid forward model")
        if row.has_gradient and not row.spec:
            row.reason = reason_for(domain, probe.op, probe.since_version, table)
            if row.reason and row.status != GRADIENT:
                row.coverage += f"; {row.reason}"
        result.append(row)
    return result


def gradient_rows(table_rows: list[Row]) -> list[Row]:
    return [r for r in table_rows if r.has_gradient]


def ops_line(table_rows: list[Row]) -> str:
    grads = gradient_rows(table_rows)
    ops = {(r.domain, r.op) for r in grads}
    covered = {(r.domain, r.op) for r in grads if r.spec}
    failed = [r for r in table_rows if r.status in (FAILED, CRASHED)]
    missing = unexplained(table_rows)
    return (f"{len(ops)} forward ops with a gradient ({len(grads)} op versions), {len(covered)} with a spec; "
            f"{len(missing)} op versions with neither a spec nor a reason; "
            f"{len(table_rows)} probes, {len(failed)} failed or crashed")


def _versions(rs: list[Row]) -> str:
    return ",".join(str(r.since_version) for r in rs)


def grouped(table_rows: list[Row]) -> list[dict]:
    """The ops with a gradient, one entry per (domain, op, via, spec cell): consecutive versions that share
    their spec and status are one line."""
    out: list[dict] = []
    for r in gradient_rows(table_rows):
        last = out[-1] if out else None
        if last and (last["domain"], last["op"], last["via"], last["spec"], last["status"]) == \
                (r.domain, r.op, r.via, r.spec, r.status) and (r.spec or last["coverage"] == r.coverage):
            last["rows"].append(r)
            continue
        out.append({"domain": r.domain, "op": r.op, "via": r.via, "spec": r.spec, "status": r.status,
                    "coverage": r.coverage, "rows": [r]})
    return out


def format_text(table_rows: list[Row], details: bool = True) -> str:
    head = ["domain", "op", "opsets", "via", "gradient", "spec"]
    lines = [head]
    for g in grouped(table_rows):
        grad = CELL[g["status"]]
        lines.append([g["domain"], g["op"], _versions(g["rows"]), g["via"], grad, g["spec"] or "-"])
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    if details:
        text.append("")
        for g in grouped(table_rows):
            where = f"{g['domain']}::{g['op']}@{_versions(g['rows'])}"
            text.append(f"{where}: {g['coverage']}" + ("" if g["status"] == GRADIENT else f" [{g['rows'][0].detail}]"))
        failed = [r for r in table_rows if r.status in (FAILED, CRASHED)]
        if failed:
            text += ["", "probes that did not answer:"]
            text += [f"{r.domain}::{r.op}@{r.since_version}: {r.detail}" for r in failed]
        missing = unexplained(table_rows)
        if missing:
            text += ["", f"neither a spec nor a reason ({len(missing)} op versions; add a spec or a `reasons:` "
                     "entry in harness/data/builder_probes.yaml): "
                     + ", ".join(f"{r.domain}::{r.op}@{r.since_version}" for r in missing)]
        none = sorted({r.op for r in table_rows if r.status == NO_GRADIENT}
                      - {r.op for r in gradient_rows(table_rows)})
        if none:
            text += ["", f"no gradient builder ({len(none)} ops): {', '.join(none)}"]
    text += ["", ops_line(table_rows)]
    return "\n".join(text)


def format_markdown(table_rows: list[Row]) -> str:
    lines = ["| domain | forward op | opsets | via | spec |", "|---|---|---|---|---|"]
    for g in grouped(table_rows):
        spec = g["spec"] or f"- ({g['coverage']})"
        via = g["via"] if g["status"] == GRADIENT else f"{g['via']} ({CELL[g['status']]})"
        lines.append(f"| {g['domain']} | {g['op']} | {_versions(g['rows'])} | {via} | {spec} |")
    return "\n".join(lines + ["", ops_line(table_rows) + "."])


def as_json(table_rows: list[Row]) -> dict:
    grads = gradient_rows(table_rows)
    return {"rows": [asdict(r) | {"has_gradient": r.has_gradient} for r in table_rows],
            "ops_with_gradient": len({(r.domain, r.op) for r in grads}),
            "ops_with_spec": len({(r.domain, r.op) for r in grads if r.spec}),
            "unexplained": [f"{r.domain}::{r.op}@{r.since_version}" for r in unexplained(table_rows)]}


def ops_list(table_rows: list[Row]) -> str:
    """`domain::Op since_version status` per op version with a gradient (status: the covering spec, or
    'no spec: <why>')."""
    out = []
    for r in gradient_rows(table_rows):
        status = f"spec {r.spec}" if r.spec else f"no spec: {r.coverage}"
        if r.status != GRADIENT:
            status += f" [{CELL[r.status]}]"
        via = "" if r.via == "builder" else f" (via {r.via})"
        out.append(f"{r.domain}::{r.op}{via} {r.since_version} {status}")
    return "\n".join(out) + "\n"


class StderrProgress:
    """Progress of a cold probe on stderr: one line rewritten in place on a terminal, else every 25th probe."""

    def __init__(self):
        self.tty, self.count = sys.stderr.isatty(), 0

    def __call__(self, line: str) -> None:
        self.count += 1
        if self.tty:
            print(f"\ropconform: {line}"[:100].ljust(100), end="", file=sys.stderr, flush=True)
        elif self.count == 1 or self.count % 25 == 0:
            print(f"opconform: {line}", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty and self.count:
            print("\r" + " " * 100 + "\r", end="", file=sys.stderr, flush=True)
