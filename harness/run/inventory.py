"""`opconform inventory`: every gradient and training op of onnxruntime-training 1.19.2 (from the
checked-in schema table, harness/data/ort_training_ops.yaml: the build has no schema listing API),
whether it runs on ORT's CPU provider, and which have a spec.

CPU check, in the ort backend's isolated worker (a crash kills the worker, never the inventory):
- an op with a spec runs the spec's representative valid case (harness.run.probe), float32 first;
- an op without one gets a one-node model built from the table: its required inputs only, each a
  small [2, 3] tensor of the first listed type (float32 where allowed), required attributes set to a
  placeholder. Only session creation is meaningful there, so `kernel registered` means the session was
  created (the run itself may then reject the placeholder values).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, get_args

import numpy as np

from harness.backends.base import Crashed, Outputs, Rejected, TimedOut, Unsupported
from harness.backends.worker import HandlerError
from harness.data import ort_training_ops
from harness.run import probe
from harness.spec.model import Spec
from harness.spec.vocabulary import FLOAT_DTYPES, IntDType

RUNS = "runs"                     # a spec's valid case ran
REGISTERED = "kernel registered"  # session created for a table-built model
NO_KERNEL = "no CPU kernel"
NOT_REGISTERED = "no schema"      # the name is unknown to this build
CRASHED = "crashed"
FAILED = "session failed"
NOT_TRIED = "not tried"
CPU_YES = {RUNS, REGISTERED}

PLACEHOLDER_ATTRS = {"int": 1, "float": 0.5, "string": "", "ints": [1], "floats": [0.5], "strings": [""]}
NUMPY = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "int32": np.int32,
         "int64": np.int64, "bool": np.bool_, "uint32": np.uint32, "uint8": np.uint8}
# Inputs whose [2, 3] placeholder the schema's shape inference refuses: BatchNormInternal's per-channel inputs are
# [C], X's dim 1 ("Dimension mismatch in unification between 2 and 3" otherwise).
PROBE_SHAPES: dict[str, dict[str, list[int]]] = {"BatchNormInternal": {"scale": [3], "B": [3], "input_mean": [3], "input_var": [3]},
                # the optimizers read one learning rate and one step (ORT reads element 0 of a longer one)
                "AdamWOptimizer": {"lr": [], "step": []}, "SGDOptimizerV2": {"lr": []}}
SEQUENCE_LENGTH = 2  # the tensors in a placeholder sequence input (the parameter list of an optimizer)
ONNX_TYPE = {"float32": 1, "uint8": 2, "int32": 6, "int64": 7, "bool": 9, "float16": 10, "float64": 11, "uint32": 12}


@dataclass
class Row:
    domain: str
    op: str
    kind: str
    cpu: str          # one of the statuses above
    spec: str         # spec id, or "" when no spec covers the op
    detail: str = ""

    @property
    def cpu_yes(self) -> bool:
        return self.cpu in CPU_YES


def spec_index(specs) -> dict[tuple[str, str], Spec]:
    # the table writes the default domain as '', specs as ai.onnx (their directory name)
    return {("" if s.domain == "ai.onnx" else s.domain, s.op): s for s in specs}


def rows(specs, backend=None, only: list[str] | None = None) -> list[Row]:
    """One Row per table op (those named in `only`, if given). backend: an open OrtBackend, or None to
    skip the CPU check (cpu = 'not tried')."""
    by_key = spec_index(specs)
    result = []
    for name, entry in ort_training_ops().items():
        if only and name not in only:
            continue
        spec = by_key.get((entry["domain"], name))
        cpu, detail = (NOT_TRIED, "") if backend is None else cpu_status(backend, entry, spec)
        result.append(Row(entry["domain"] or "ai.onnx", name, entry["kind"], cpu, spec.id if spec else "", detail))
    return result


def cpu_status(backend, entry: dict, spec) -> tuple[str, str]:
    if spec is not None:
        return _spec_status(backend, spec)
    # Placeholder models can trip over shape inference or an omitted optional output (SoftmaxCrossEntropy
    # without log_prob kills the process): try variants until one answers whether a kernel exists.
    first: tuple[str, str] | None = None
    for shaped, all_outputs, note in ((True, False, ""), (True, True, " (with every optional output)"),
                                      (False, False, " (inputs declared without shapes)")):
        status, detail = _table_status(backend, entry, shaped, all_outputs)
        if status in (REGISTERED, NO_KERNEL, NOT_REGISTERED, NOT_TRIED):
            return status, detail + note if first else detail
        first = first or (status, detail)
    if first is None:
        raise AssertionError("the first variant either answered or was kept")
    return first


def _table_status(backend, entry: dict, shaped: bool, all_outputs: bool) -> tuple[str, str]:
    status, detail = _table_run(backend, entry, shaped, all_outputs, "int64")
    if status == NO_KERNEL and any({"int32", "int64"} <= set(t) for t in entry["type_constraints"].values()):
        retry = _table_run(backend, entry, shaped, all_outputs, "int32")  # a kernel for int32 only?
        if retry[0] == REGISTERED:
            return retry
    return status, detail


def _table_run(backend, entry: dict, shaped: bool, all_outputs: bool, integer: str) -> tuple[str, str]:
    try:
        model, feeds, fetches = table_model(entry, shaped, all_outputs, integer)
    except ValueError as e:
        return NOT_TRIED, str(e)
    try:
        reply = backend.worker.call({"call": "run", "model": model, "feeds": feeds, "fetches": fetches,
                                     "threads": 1, "provider": "CPUExecutionProvider"})
    except HandlerError as e:
        phase, _, message = e.message.split("|", 2) if e.cls == "OrtError" else ("run", e.cls, e.message)
        return _error_status(phase, " ".join(message.split()))
    if isinstance(reply, Crashed):
        return CRASHED, str(reply)
    if isinstance(reply, TimedOut):
        return CRASHED, f"timed out: {reply}"
    return REGISTERED, "ran with placeholder inputs"


def _error_status(phase: str, message: str) -> tuple[str, str]:
    if "Could not find an implementation" in message:
        return NO_KERNEL, message[:200]
    if "No Op registered" in message or "is not a registered function/op" in message:
        return NOT_REGISTERED, message[:200]
    if phase == "run":  # the session was created: the kernel exists; the placeholder values were refused
        return REGISTERED, f"run refused placeholder inputs: {message[:160]}"
    return FAILED, message[:200]


def _spec_status(backend, spec) -> tuple[str, str]:
    types = spec.type_constraints[spec.main_type].types
    dtype = "float32" if "float32" in types else types[0]
    try:
        request = probe.probe_request(spec, dtype)
    except probe.ProbeError as e:
        return NOT_TRIED, str(e)
    result = backend.run(request)
    if isinstance(result, Outputs):
        return RUNS, f"{dtype} case of {spec.id}"
    if isinstance(result, Crashed):
        return CRASHED, str(result)
    if isinstance(result, TimedOut):
        return CRASHED, f"timed out: {result}"
    reason = getattr(result, "reason", str(result))
    if isinstance(result, Unsupported):
        return (NO_KERNEL if "no kernel" in reason else FAILED), reason[:200]
    if isinstance(result, Rejected):
        return _error_status("session" if "at session" in reason else "run", reason)
    return FAILED, str(result)[:200]


def table_model(entry: dict, shaped: bool = True, all_outputs: bool = False,
                integer: str = "int64") -> tuple[bytes, dict, list[str]]:
    """A one-node model of `entry` with its required inputs fed small tensors, declared [2, 3] (or
    without a shape: `shaped` False); a sequence input (seq(float32): an optimizer's parameter list) is fed a
    list of SEQUENCE_LENGTH such tensors.
    A type variable allowing both int32 and int64 takes `integer` (ORT's CPU kernels mostly register
    int64 shape and index inputs: GatherGrad's shape has no int32 kernel)."""
    from onnx import helper

    constraints = entry["type_constraints"]

    def concrete(type_name: str) -> str:
        options = [t[len("seq("):-1] if t.startswith("seq(") else t for t in constraints.get(type_name, [type_name])]
        if "float32" in options or not set(options) & set(NUMPY):
            return "float32"
        return integer if {"int32", "int64"} <= set(options) else options[0]

    feeds: dict[str, np.ndarray | list[np.ndarray]] = {}
    graph_inputs, names = [], []
    for formal in entry["inputs"]:
        if formal.get("option") == "optional":
            names.append("")
            continue
        dtype = concrete(formal["type"])
        shape = PROBE_SHAPES.get(entry["op"], {}).get(formal["name"], [2, 3])
        if any(t.startswith("seq(") for t in constraints.get(formal["type"], [])):
            feeds[formal["name"]] = [np.ones(shape, dtype=NUMPY[dtype]) for _ in range(SEQUENCE_LENGTH)]
            graph_inputs.append(helper.make_tensor_sequence_value_info(formal["name"], ONNX_TYPE[dtype],
                                                                       shape if shaped else None))
        else:
            feeds[formal["name"]] = np.ones(shape, dtype=NUMPY[dtype])
            graph_inputs.append(helper.make_tensor_value_info(formal["name"], ONNX_TYPE[dtype], shape if shaped else None))
        names.append(formal["name"])
    while names and names[-1] == "":
        names.pop()
    required = [o["name"] for o in entry["outputs"] if o.get("option") != "optional"]
    outputs = [o["name"] for o in entry["outputs"]] if all_outputs else (required or [entry["outputs"][0]["name"]])
    attrs: dict[str, Any] = {name: PLACEHOLDER_ATTRS[a["type"]] for name, a in entry["attributes"].items()
                             if a.get("required")}
    if entry["op"] in ("LSTMTraining", "LSTMGrad", "GRUTraining", "GRUGrad"):
        attrs["hidden_size"] = 1  # optional in the schema, required by every kernel
    node = helper.make_node(entry["op"], names, outputs, domain=entry["domain"], **attrs)
    # an output whose type variable no input binds (InvertibleLayerNormalizationGrad's X_grad: T) is declared with
    # its concrete type, else type inference fails before the kernel lookup
    bound = {formal["type"] for formal in entry["inputs"]}
    out_types = {o["name"]: o["type"] for o in entry["outputs"]}
    graph = helper.make_graph([node], "inventory", graph_inputs, [
        helper.make_empty_tensor_value_info(o) if out_types[o] in bound
        else helper.make_tensor_value_info(o, ONNX_TYPE[concrete(out_types[o])], None) for o in outputs])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    return model.SerializeToString(), feeds, outputs


def covered(table_rows: list[Row]) -> tuple[int, int]:
    """(CPU ops with a spec, CPU ops)."""
    cpu = [r for r in table_rows if r.cpu_yes]
    return sum(1 for r in cpu if r.spec), len(cpu)


def coverage_line(table_rows: list[Row]) -> str:
    have, total = covered(table_rows)
    return f"{have} of {total} CPU ops covered ({len(table_rows)} ops in the table)"


# ONNX's named type lists (onnx/defs/schema.cc, OpSchema::all_tensor_types() etc.) as ORT's training schemas use
# them; the op table keeps the name where a schema writes a list instead of types. The _ir4 lists add bfloat16.
_IR3_FLOATS = [d for d in FLOAT_DTYPES if d != "bfloat16"]
_REDUCTION = ["uint32", "uint64", *get_args(IntDType), *_IR3_FLOATS]
_NUMERIC = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", *get_args(IntDType), *_IR3_FLOATS]
_OTHER = ["string", "bool", "complex64", "complex128"]
TYPE_GROUPS = {
    "all_numeric_types": _NUMERIC,
    "all_tensor_types": _NUMERIC + _OTHER,
    "all_tensor_types_ir4": _NUMERIC + _OTHER + ["bfloat16"],
    "numeric_types_for_math_reduction": _REDUCTION,
    "numeric_types_for_math_reduction_ir4": _REDUCTION + ["bfloat16"],
}


COLUMNS = ("domain", "op", "kind", "CPU", "spec")


def cpu_cell(r: Row) -> str:
    """yes; no (no kernel or no schema); crashed; ? (the placeholder model was refused, or not tried)."""
    if r.cpu_yes:
        return "yes"
    return {NO_KERNEL: "no", NOT_REGISTERED: "no", CRASHED: "crashed"}.get(r.cpu, "?")


def _cells(r: Row) -> list[str]:
    return [r.domain, r.op, r.kind, cpu_cell(r), r.spec or "-"]


def format_text(table_rows: list[Row], details: bool = True) -> str:
    """Same style as `opconform probe`: aligned columns, then one line per op that is not CPU-runnable."""
    table = [list(COLUMNS)] + [_cells(r) for r in table_rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if details:
        lines += [""] + [f"{r.op}: {r.cpu}: {r.detail}" if r.detail else f"{r.op}: {r.cpu}"
                         for r in table_rows if not r.cpu_yes]
    lines += ["", coverage_line(table_rows)]
    return "\n".join(lines)


def format_markdown(table_rows: list[Row]) -> str:
    lines = ["| domain | op | kind | CPU (ORT 1.19.2) | spec |", "|---|---|---|---|---|"]
    for r in table_rows:
        cpu = cpu_cell(r) if cpu_cell(r) in ("yes", "no", "crashed") else f"? ({r.cpu})"
        lines.append(f"| {r.domain} | {r.op} | {r.kind} | {cpu} | {'yes' if r.spec else '-'} |")
    return "\n".join(lines + ["", coverage_line(table_rows) + "."])


def format_json(table_rows: list[Row]) -> str:
    have, total = covered(table_rows)
    return json.dumps({"rows": [asdict(r) | {"cpu_yes": r.cpu_yes} for r in table_rows],
                       "covered": have, "cpu_ops": total}, indent=1)


def schema_differences(spec, entry: dict) -> list[str]:
    """Where a spec's signature disagrees with the table: input/output names, order and optionality,
    the dtypes of each type variable (a spec dtype the schema lacks), and the schema's attributes
    (names and defaults). Names are compared only when the table's are verified."""
    diffs = []
    names_verified = entry.get("names_verified", True)
    for kind, spec_side, table_side in (("input", spec.inputs, entry["inputs"]), ("output", spec.outputs, entry["outputs"])):
        if len(spec_side) != len(table_side):
            diffs.append(f"{kind}s: spec has {len(spec_side)}, schema {len(table_side)}")
        for i, (s, t) in enumerate(zip(spec_side, table_side)):
            if names_verified and s.name != t["name"]:
                diffs.append(f"{kind} {i}: spec '{s.name}', schema '{t['name']}'")
            schema_types = {d for name in entry["type_constraints"].get(t["type"], [t["type"]])
                            for d in TYPE_GROUPS.get(name, [name])}
            constraint = spec.type_constraints.get(s.type)
            # a sequence variable's types read seq(T) in the table, as ONNX writes seq(tensor(T))
            spec_types = ({f"seq({t})" if constraint.sequence else t for t in constraint.types} if constraint
                          else {s.type})
            extra = spec_types - schema_types
            if extra:
                diffs.append(f"{kind} {i} ({s.name}): dtypes {sorted(extra)} not in the schema's {sorted(schema_types)}")
    for name, attr in entry["attributes"].items():
        spec_attr = spec.attributes.get(name)
        if spec_attr is None:
            diffs.append(f"attribute '{name}' of the schema is not declared")
        elif "default" in attr and spec_attr.default is not None and spec_attr.default != attr["default"]:
            if not (isinstance(attr["default"], float) and abs(spec_attr.default - attr["default"]) < 1e-6):
                diffs.append(f"attribute '{name}': spec default {spec_attr.default!r}, schema {attr['default']!r}")
    if not entry.get("allow_unchecked_attributes"):
        forward_only = set(getattr(spec, "forward_attributes", None) or {})
        for name in spec.attributes:
            if name not in entry["attributes"] and name not in forward_only:
                diffs.append(f"attribute '{name}' is not in the schema (which checks attributes)")
    return diffs
