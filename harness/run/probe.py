"""Capability probing: what each backend really runs, per op x dtype, and how.

A backend's declared schemas are not evidence (onnxruntime-training's claim bfloat16 and float64 where
its CPU provider has float32 kernels only), so each (op, dtype) is probed by running one
representative valid case of the spec, cast to that dtype, through the backend's own `probe()`:

    supported       it runs; `how`: kernel, function_body, cast+kernel, cast+function_body (ORT),
                    reference (the NumPy reference), assumed (a backend that cannot tell)
    not_registered  the op's type constraints reject the dtype (the spec's, or the backend's schema)
    no_kernel       the type is accepted but nothing implements it (or only another provider does)
    unavailable     the backend is not usable here (not installed, no GPU); the reason says which
    error           the probe case itself failed: the cases run and show for themselves

The engine reports every case of a gating status (not_registered, no_kernel, unavailable) as
`unsupported` without running it, so a backend can never pass cases in a dtype it does not support,
even one it would run silently (e.g. on another provider).
"""
from __future__ import annotations

from harness.backends.base import Backend, ForwardCall, Request, Support
from harness.core import dtypes, sequences
from harness.core.cases import TIERS, Case, expand
from harness.core.shapes import input_shapes
from harness.core.tensors import forward_call_parts, make_tensors
from harness.spec.model import Spec

LABELS = {"kernel": "kernel", "function_body": "function body", "cast+kernel": "cast > kernel",
          "cast+function_body": "cast > function body", "reference": "reference", "assumed": "runs (assumed)",
          "declared": "declared", "gradient_graph": "gradient graph",
          "not_registered": "not registered", "no_kernel": "no kernel", "unavailable": "unavailable",
          "error": "probe failed"}


class ProbeError(ValueError):
    """The spec has no valid case to probe with."""


def representative_case(spec: Spec) -> Case:
    """The first valid case with no empty tensor, smallest tier first: what every probe of this spec runs."""
    for tier in TIERS:
        for case in expand(spec, tier):
            if case.valid and all(s is None or 0 not in s for s in input_shapes(case).values()):
                return case
    raise ProbeError(f"{spec.id} has no valid case with non-empty inputs to probe with")


def probe_request(spec: Spec, dtype: str) -> Request:
    """The representative case's inputs cast to `dtype` (also outside the spec's type constraints, to
    see what a backend does there); inputs of another type variable (e.g. int32 lengths) stay as drawn."""
    case = representative_case(spec)
    inputs, forward_args = make_tensors(case)
    main_type = spec.main_type
    values = [inputs.get(inp.name) for inp in spec.inputs]  # positional, in the spec's input order
    cast = [v if v is None or inp.type != main_type else sequences.astype(v, dtypes.NUMPY[dtype])
            for inp, v in zip(spec.inputs, values)]
    wanted = set(case.requested_outputs)
    forward = None
    if spec.forward is not None:
        drawn, attributes, missing = forward_call_parts(case, inputs, forward_args)
        # a forward input the op takes keeps its own type variable (Resize's float32 scales); the rest follow dY's
        other_type = {i.forward_name or i.name for i in spec.inputs if i.type != main_type}
        forward_values = {k: v if v is None or k in other_type or dtypes.name_of(v.dtype) != case.dtype
                          else v.astype(dtypes.NUMPY[dtype]) for k, v in drawn.items()}
        forward = ForwardCall(forward_values, attributes, missing)
    return Request(spec, dtype, cast, case.attributes, tuple(o.name in wanted for o in spec.outputs), forward=forward)


def in_contract(spec: Spec, dtype: str) -> bool:
    return dtype in spec.type_constraints[spec.main_type].types


def capability(backend: Backend, spec: Spec, dtype: str) -> Support:
    """The backend's support for (spec, dtype), probed once per backend object and remembered."""
    cache = backend.__dict__.setdefault("_capabilities", {})
    key = (spec.id, dtype)
    if key not in cache:
        cache[key] = _probe(backend, spec, dtype)
    return cache[key]


def _probe(backend: Backend, spec: Spec, dtype: str) -> Support:
    if reason := backend.availability():
        return Support("unavailable", reason=reason)
    if spec.subject not in backend.SUBJECTS:
        return Support("not_registered", reason=f"{spec.op} is a {spec.subject} spec ({spec.forward.op if spec.forward else spec.op}'s "
                       f"gradient as ORT's builder writes it): {backend.name} runs single kernels")
    try:
        request = probe_request(spec, dtype)
    except Exception as e:  # noqa: BLE001 - a spec that cannot build its own cases: the runs will report it as an error
        return Support("error", reason=f"no probe case: {type(e).__name__}: {e}")
    try:
        support = backend.probe(request)
    except Exception as e:  # noqa: BLE001 - an adapter bug must not stop a run
        return Support("error", reason=f"{backend.name}.probe raised {type(e).__name__}: {e}")
    if support.status == "supported" and not in_contract(spec, dtype):
        # The backend runs it, but the spec does not allow the dtype: no case can be judged there.
        note = f"{spec.op}'s spec allows {', '.join(spec.type_constraints[spec.main_type].types)}"
        return Support("supported", support.how, f"{support.reason} (outside the contract: {note})")
    return support


def pairs(specs: list[Spec], dtype_names: list[str] | None = None) -> list[tuple[Spec, str]]:
    """(spec, dtype) to probe: the given dtypes, else the dtypes each spec's cases run in."""
    return [(spec, dtype) for spec in specs
            for dtype in dtype_names or sorted({c.dtype for c in expand(spec)}, key=_dtype_order)]


def pairs_of(cases) -> list[tuple[Spec, str]]:
    """The distinct (spec, dtype) of a run's cases, in order."""
    return list({(c.spec.id, c.dtype): (c.spec, c.dtype) for c in cases}.values())


def matrix(backends: list[Backend], probed: list[tuple[Spec, str]], unavailable: dict[str, str] | None = None) -> list[dict]:
    """One row per (spec, dtype) x backend: {backend, op, spec, dtype, status, how, reason}. unavailable:
    name -> reason for backends not opened here, reported as unavailable for every op and dtype."""
    rows = []
    for spec, dtype in probed:
        for backend in backends:
            rows.append(_row(backend.name, spec, dtype, capability(backend, spec, dtype)))
        for name, reason in (unavailable or {}).items():
            rows.append(_row(name, spec, dtype, Support("unavailable", reason=reason)))
    return rows


def _dtype_order(dtype: str) -> int:
    order = dtypes.FLOATS
    return order.index(dtype) if dtype in order else len(order)


def _row(backend: str, spec: Spec, dtype: str, support: Support) -> dict:
    return {"backend": backend, "op": spec.op, "spec": spec.id, "dtype": dtype, "status": support.status,
            "how": support.how, "reason": support.reason}


def label(row: dict) -> str:
    return LABELS.get(row["how"] if row["status"] == "supported" else row["status"], row["status"])


def format_matrix(rows: list[dict], reasons: bool = True) -> str:
    """The matrix as text: one line per op x dtype, one column per backend; then why, per cell that does not run."""
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    cells = {(r["op"], r["dtype"], r["backend"]): r for r in rows}
    keys = list(dict.fromkeys((r["op"], r["dtype"]) for r in rows))
    table = [["op", "dtype", *backends]] + [[op, dtype, *(label(cells[(op, dtype, b)]) if (op, dtype, b) in cells else "-"
                                                          for b in backends)] for op, dtype in keys]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if reasons:
        why = [r for r in rows if r["status"] != "supported" or r["how"].startswith("cast")]
        unavailable = {r["backend"]: r["reason"] for r in why if r["status"] == "unavailable"}
        lines += [""] + [f"{b}: unavailable: {reason}" for b, reason in unavailable.items()]
        lines += [f"{r['op']} {r['dtype']} [{r['backend']}] {label(r)}: {r['reason']}"
                  for r in why if r["status"] != "unavailable"]
    return "\n".join(lines).rstrip()
