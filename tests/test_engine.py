"""The engine's decisions, table-driven with stub backends: one row per (declared divergence or
waiver, observed outcome, dtype, case id) and the status it must give; then the verdict over the
statuses, the output dtype check and the reduction allowance.

Each row builds a spec copy with the row's declaration, runs one case on a stub backend whose outcome
the row names, and checks status, failure kind and which declaration explains it."""
from __future__ import annotations

import dataclasses
import datetime
import math

import numpy as np
import pytest

from harness.backends.base import Backend, Crashed, Outputs, Rejected, TimedOut
from harness.core import dtypes
from harness.core.cases import expand
from harness.core.evaluate import evaluate
from harness.core.tolerance import Reduction, allowances, unit_roundoff
from harness.run import gate, rundir
from harness.run.case_checks import run_case
from harness.run.engine import prepare
from harness.run.waivers import Waiver
from harness.spec.model import Divergence

STUB = "stub"


@dataclasses.dataclass
class StubBackend(Backend):
    """Returns what `behaviour` makes of the reference outputs rounded to the case dtype."""
    behaviour: str = "right"

    def __post_init__(self):
        self.name = STUB

    def run(self, request):
        spec, dtype = request.spec, request.dtype
        if self.behaviour == "crash":
            return Crashed("SIGSEGV")
        if self.behaviour == "hang":
            return TimedOut(1.0)
        if self.behaviour == "reject":
            return Rejected("no")
        values = evaluate(spec, request.named_inputs(), request.attributes)
        out = []
        for o, v, wanted in zip(spec.outputs, values, request.outputs):
            v = v.astype(dtypes.NUMPY[spec.dtype_of(o, dtype)])
            if self.behaviour == "off" and v.size:  # one element far outside any tolerance
                v = v.copy()
                v.flat[0] = v.flat[0] * 2 + 1
            if self.behaviour == "nan" and v.size:
                v = v.copy()
                v.flat[0] = np.nan
            if self.behaviour == "float64":  # the right values in the wrong dtype
                v = v.astype(np.float64)
            out.append(v if wanted else None)
        return Outputs(out)


def divergence(**fields) -> Divergence:
    base = {"id": "stub-div", "backend": STUB, "cases": ["basic/*"], "result": "wrong_values",
            "summary": "the stub is wrong here on purpose", "evidence": "planted by tests/test_engine.py"}
    return Divergence(**{**base, **fields})


def waiver(**fields) -> Waiver:
    base = {"id": "STUB-1", "kind": "xfail", "match": {"op": "ReluGrad", "cases": ["basic/*"]},
            "reason": "planted by tests/test_engine.py", "tracking": "https://example.invalid/1",
            "review_by": "2999-01-01"}
    w = {**base, **fields}
    return Waiver.model_validate(w).model_copy(update={"backend": STUB})


def one_result(catalog, op, full_id, behaviour, divergences=(), waivers=()):
    spec = catalog.by_op(op).model_copy(update={"known_divergences": list(divergences)})
    case = next(c for c in expand(spec) if c.full_id == full_id)
    cat = dataclasses.replace(catalog, waivers=list(waivers))
    results = run_case(cat, prepare(case), StubBackend(behaviour=behaviour))
    return results[0]


# (declaration, observed outcome, case dtype-id) -> (status, failure, divergence or waiver that explains it)
DIVERGENCE_ROWS = [
    # a plain run: no declaration
    (None, "right", "float32-basic/shape=7", ("pass", None, None)),
    (None, "off", "float32-basic/shape=7", ("fail", "wrong_values", None)),
    (None, "nan", "float32-basic/shape=7", ("fail", "wrong_values", None)),
    (None, "crash", "float32-basic/shape=7", ("crashed", "crash", None)),
    (None, "hang", "float32-basic/shape=7", ("crashed", "hang", None)),
    (None, "reject", "float32-basic/shape=7", ("fail", "rejects_valid", None)),
    (None, "float64", "float32-basic/shape=7", ("fail", "wrong_shape", None)),  # (c) wrong dtype
    (None, "float64", "float64-basic/shape=7", ("pass", None, None)),
    # a declared divergence explains exactly what it declares
    (divergence(), "off", "float32-basic/shape=7", ("divergent", "wrong_values", "stub-div")),
    (divergence(), "right", "float32-basic/shape=7", ("pass", None, "stub-div")),  # did not reproduce
    (divergence(result="crash"), "crash", "float32-basic/shape=7", ("divergent", "crash", "stub-div")),
    # (a) its failure kinds: a crash declaration does not excuse wrong values, nor wrong values a crash
    (divergence(result="crash"), "off", "float32-basic/shape=7", ("fail", "wrong_values", "stub-div")),
    (divergence(), "crash", "float32-basic/shape=7", ("crashed", "crash", "stub-div")),
    (divergence(result="unsupported"), "reject", "float32-basic/shape=7", ("unsupported", "rejects_valid", "stub-div")),
    # a refusal declared as a defect (a gradient builder refusing a valid model) is divergent, never unsupported
    (divergence(result="rejects_valid"), "reject", "float32-basic/shape=7", ("divergent", "rejects_valid", "stub-div")),
    (divergence(result="rejects_valid"), "off", "float32-basic/shape=7", ("fail", "wrong_values", "stub-div")),
    # (a) its dtypes: declared for float16 only, a float32 failure stays a failure
    (divergence(dtypes=["float16"]), "off", "float32-basic/shape=7", ("fail", "wrong_values", None)),
    (divergence(dtypes=["float16"]), "off", "float16-basic/shape=7", ("divergent", "wrong_values", "stub-div")),
    # (a) its case glob: the whole case id, not just the group
    (divergence(cases=["basic/shape=3x4"]), "off", "float32-basic/shape=7", ("fail", "wrong_values", None)),
    (divergence(cases=["basic/shape=3x4"]), "off", "float32-basic/shape=3x4", ("divergent", "wrong_values", "stub-div")),
    (divergence(cases=["shapes/*"]), "off", "float32-basic/shape=7", ("fail", "wrong_values", None)),
    # its backend
    (divergence(backend="ort"), "off", "float32-basic/shape=7", ("fail", "wrong_values", None)),
    # its outputs: a divergence on another output does not excuse dX
    (divergence(outputs=["dY"]), "off", "float32-basic/shape=7", ("fail", "wrong_values", "stub-div")),
]


@pytest.mark.parametrize("declared, behaviour, full_id, expected", DIVERGENCE_ROWS,
                         ids=[f"{i}-{r[1]}-{r[2]}" for i, r in enumerate(DIVERGENCE_ROWS)])
def test_divergence_rows(catalog, declared, behaviour, full_id, expected):
    r = one_result(catalog, "ReluGrad", full_id, behaviour, [declared] if declared else [])
    assert (r.status, r.failure, r.divergence) == expected, r.detail
    if r.divergence:
        assert r.divergence_reproduced == (r.status in ("divergent", "unsupported"))


WAIVER_ROWS = [
    (waiver(), "off", "float32-basic/shape=7", ("waived", "wrong_values", "STUB-1")),
    (waiver(), "right", "float32-basic/shape=7", ("fail", "xpass", "STUB-1")),  # strict
    (waiver(failure="crash"), "off", "float32-basic/shape=7", ("fail", "wrong_values", None)),
    (waiver(failure="crash"), "crash", "float32-basic/shape=7", ("waived", "crash", "STUB-1")),
    (waiver(match={"op": "ReluGrad", "cases": ["basic/*"], "dtypes": ["float16"]}), "off", "float32-basic/shape=7",
     ("fail", "wrong_values", None)),
    (waiver(match={"op": "ReluGrad", "cases": ["basic/shape=3x4"]}), "off", "float32-basic/shape=7",
     ("fail", "wrong_values", None)),
    (waiver(kind="divergence"), "off", "float32-basic/shape=7", ("waived", "wrong_values", "STUB-1")),
    # a tolerance waiver covers values out of tolerance, never a NaN or a wrong dtype
    (waiver(kind="tolerance", budget_multiplier=1e30, observed_budget=1.0), "off", "float32-basic/shape=7",
     ("waived", "wrong_values", "STUB-1")),
    (waiver(kind="tolerance", budget_multiplier=1e30, observed_budget=1.0), "nan", "float32-basic/shape=7",
     ("fail", "wrong_values", None)),
    (waiver(kind="tolerance", budget_multiplier=1e30, observed_budget=1.0), "float64", "float32-basic/shape=7",
     ("fail", "wrong_shape", None)),
    (waiver(kind="tolerance", budget_multiplier=1.5, observed_budget=1.0), "off", "float32-basic/shape=7",
     ("fail", "wrong_values", None)),
]


@pytest.mark.parametrize("declared, behaviour, full_id, expected", WAIVER_ROWS,
                         ids=[f"{i}-{r[0].kind}-{r[1]}" for i, r in enumerate(WAIVER_ROWS)])
def test_waiver_rows(catalog, declared, behaviour, full_id, expected):
    r = one_result(catalog, "ReluGrad", full_id, behaviour, waivers=[declared])
    assert (r.status, r.failure, r.waiver) == expected, r.detail


# ---- the verdict over statuses: (b) ------------------------------------------------------------

def record(status, failure=None, **extra):
    return {"spec": "s", "op": "Op", "backend": "b", "dtype": "float32", "case": "g/x=1", "check": "reference",
            "status": status, "failure": failure, **extra}


VERDICT_ROWS = [
    ([record("pass")], True),
    ([record("pass"), record("fail", "wrong_values")], False),
    ([record("pass"), record("crashed", "crash")], False),
    ([record("pass"), record("crashed", "hang")], False),
    ([record("pass"), record("error")], False),
    ([record("pass"), record("divergent", "crash", divergence="d", divergence_reproduced=True)], True),
    ([record("pass"), record("unsupported")], True),
    ([record("pass"), record("pass", divergence="d", divergence_reproduced=False)], False),  # stale divergence
    ([record("pass"), record("fail", "not_a_gradient", check="gradient")], False),
    ([], False),
]


@pytest.mark.parametrize("records, passed", VERDICT_ROWS)
def test_verdict_rows(records, passed):
    assert gate.verdict(records, [], today=datetime.date(2026, 1, 1))["passed"] is passed


def test_a_missing_expected_backend_fails_the_verdict():
    missing = rundir.missing_expected({"openmp": {"available": False, "reason": "no lib"},
                                       "ort-cuda": {"available": False, "reason": "no GPU"}})
    assert missing == [{"name": "openmp", "reason": "no lib"}]  # ort-cuda is not expected
    v = gate.verdict([record("pass")], [], missing_backends=missing)
    assert not v["passed"] and any("openmp" in r and "no lib" in r for r in v["reasons"])
    assert rundir.missing_expected({"openmp": {"available": False, "reason": "x"}}, left_out={"openmp"}) == []


def test_merge_fails_on_a_crash(tmp_path, catalog):
    """(b) through `opconform merge`: a crashed record in a shard fails the merged verdict."""
    good = {**record("pass"), "spec": catalog.specs[0].id, "op": catalog.specs[0].op}
    crashed = {**good, "case": "g/x=2", "status": "crashed", "failure": "crash"}
    for name, records in (("a", [good]), ("b", [crashed])):
        rundir.write_run(tmp_path / name, records, {"complete": True})
    summary = rundir.merge([tmp_path / "a", tmp_path / "b"], tmp_path / "out", catalog)
    assert not summary["verdict"]["passed"]
    assert summary["totals"]["crashed"] == 1


# ---- the reduction allowance and its note: (d) -------------------------------------------------

def test_reduction_allowance_is_sqrt_k_and_its_note_says_the_same_numbers(catalog):
    from harness.core.shapes import resolve_attributes
    from harness.spec.dotted import resolve

    spec = catalog.by_op("SoftmaxGrad_13")
    case = next(c for c in expand(spec, "ci") if c.dtype == "float32" and c.valid and c.id.startswith("basic/"))
    prepared = prepare(case)
    args = {n: None if v is None else v.astype(np.float64) for n, v in prepared.inputs.items()}
    attrs = resolve_attributes(spec, case.attributes)
    k = int(resolve(spec.accuracy.reduction_length)(**args, **attrs))
    (allowance,), (note,) = allowances(spec, prepared.inputs, case.attributes, case.dtype, prepared.expected)
    accumulate = spec.accuracy.accumulate.get("float32", "float32")
    per_unit = spec.accuracy.factor * unit_roundoff(accumulate) * math.sqrt(k)
    assert k > 1 and Reduction(k, accumulate, spec.accuracy.factor).per_unit_magnitude == pytest.approx(per_unit)
    assert f"K={k}" in note and f"sqrt(K)={math.sqrt(k):.4g}" in note, note
    m = resolve(spec.accuracy.magnitude)(**args, **attrs) if spec.accuracy.magnitude else np.abs(prepared.expected[0])
    m = np.broadcast_to(m[0] if isinstance(m, (tuple, list)) else m, allowance.shape)
    finite = np.isfinite(m) & (m > 0)
    assert finite.any()
    np.testing.assert_allclose(allowance[finite], per_unit * m[finite], rtol=1e-12)
