"""Waivers: validation (one line naming file and field), how the engine applies each kind, and
`opconform waivers propose`, which prints drafts that validation rejects until a person fills them in."""
import dataclasses
import datetime
import json
from dataclasses import dataclass
from typing import ClassVar

import pytest
import yaml
from conftest import edit

from harness import backends as registry
from harness.backends.base import Backend, Outputs
from harness.backends.reference import ReferenceBackend
from harness.cli import main
from harness.core.spec_loader import Catalog
from harness.core.spec_loader import load_catalog as load_specs
from harness.run.catalog import RunCatalog
from harness.run.catalog import load as load_catalog  # the specs with their waivers
from harness.run.rundir import read_results
from harness.run.waivers import Waiver
from harness.spec.errors import SpecError


@dataclass
class SkewedBackend(Backend):
    """The reference's float32 outputs scaled by 1 + 3e-4 (about 3x the float32 tolerance): a kernel that
    is slightly wrong in float32 and exact elsewhere. Records the dtypes it was asked to run."""
    calls: ClassVar[list] = []

    def __post_init__(self):
        self.name = "skewed"

    def run(self, request):
        SkewedBackend.calls.append(request.dtype)
        out = ReferenceBackend().run(request)
        if request.dtype != "float32":
            return out
        return Outputs([None if v is None else (v * (1 + 3e-4)).astype(v.dtype) for v in out.values])


@pytest.fixture
def skewed(monkeypatch):
    monkeypatch.setitem(registry.FACTORIES, "skewed", SkewedBackend)
    SkewedBackend.calls = []


@pytest.fixture(autouse=True)
def few_specs(spec_copy):
    """Only the specs these tests use: loading is faster, and other ops' edits cannot interfere."""
    for path in spec_copy.glob("com.microsoft/*.yaml"):
        if path.stem not in ("TanhGrad", "GeluGrad"):
            path.unlink()


WAIVER = {"id": "SKW-0001", "kind": "xfail",
          "match": {"op": "TanhGrad", "dtypes": ["float32"], "cases": ["basic/*"], "outputs": ["dX"]},
          "failure": "wrong_values",
          "reason": "float32 results are scaled by 1 + 3e-4: the test double of a kernel bug",
          "tracking": "https://github.com/example/opconform/issues/1", "review_by": "2099-01-31"}


def write_waivers(spec_dir, *waivers, backend="skewed"):
    (spec_dir / "_waivers").mkdir(exist_ok=True)
    (spec_dir / "_waivers" / f"{backend}.yaml").write_text(yaml.safe_dump({"backend": backend, "waivers": list(waivers)}))


def waiver(**changes):
    out = json.loads(json.dumps(WAIVER))
    for key, value in changes.items():
        if key.startswith("match_"):
            out["match"][key[len("match_"):]] = value
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def run(capsys, spec_dir, tmp_path, *extra):
    code = main(["run", "--specs", str(spec_dir), "--no-builtin-specs", "--ops", "TanhGrad", "--backends", "skewed", "--tier", "smoke",
                 "--out", str(tmp_path / "run"), "--no-progress", *extra])
    out, err = capsys.readouterr()
    records = read_results(tmp_path / "run")
    return code, out + err, records


# ---- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize("change, field, message", [
    ({"reason": None}, "waivers[0].reason", "missing; add `reason:`"),
    ({"reason": ""}, "waivers[0].reason", "empty: write why"),
    ({"reason": "TODO"}, "waivers[0].reason", "empty: write why"),
    ({"tracking": None}, "waivers[0].tracking", "missing; add `tracking:`"),
    ({"tracking": ""}, "waivers[0].tracking", "empty: link the issue"),
    ({"review_by": None}, "waivers[0].review_by", "missing; add `review_by:`"),
    ({"review_by": "soon"}, "waivers[0].review_by", "got 'soon'"),
    ({"kind": "ignore"}, "waivers[0].kind", "got 'ignore'"),
    ({"match_op": "TanhGard"}, "waivers[0].match.op", "unknown op 'TanhGard'; did you mean 'TanhGrad'?"),
    ({"match_cases": ["basics/*"]}, "waivers[0].match.cases", "'basics/*' matches no case id of TanhGrad"),
    ({"match_outputs": ["dY"]}, "waivers[0].match.outputs", "unknown output 'dY'"),
    ({"match_dtypes": ["int32"]}, "waivers[0].match.dtypes", "TanhGrad has no int32 cases"),
    ({"kind": "skip", "failure": None}, "waivers[0].because", "a skip says why"),
    ({"kind": "tolerance", "failure": None, "budget_multiplier": 2.0}, "waivers[0].observed_budget", "missing"),
    ({"kind": "tolerance", "failure": None, "budget_multiplier": 2.0, "observed_budget": 2.5},
     "waivers[0].budget_multiplier", "x2 does not cover the observed x2.5"),
])
def test_a_bad_waiver_is_one_line_naming_file_and_field(skewed, spec_copy, change, field, message):
    write_waivers(spec_copy, waiver(**change))
    with pytest.raises(SpecError) as info:
        load_catalog(spec_copy)
    lines = str(info.value).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{spec_copy}/_waivers/skewed.yaml: {field}: ") and message in lines[0], lines[0]


def test_waiver_file_named_after_another_backend_and_duplicate_ids(skewed, spec_copy):
    write_waivers(spec_copy, waiver(), waiver())
    (spec_copy / "_waivers" / "skewed.yaml").rename(spec_copy / "_waivers" / "ort.yaml")
    with pytest.raises(SpecError) as info:
        load_catalog(spec_copy)
    text = str(info.value)
    assert "ort.yaml: backend: the file is named ort.yaml but holds waivers for 'skewed'" in text
    assert "waivers[1].id: SKW-0001 is already used" in text


def test_valid_waivers_load_with_their_backend(skewed, spec_copy):
    write_waivers(spec_copy, waiver())
    [w] = load_catalog(spec_copy).waivers
    assert (w.id, w.backend, w.review_by) == ("SKW-0001", "skewed", datetime.date(2099, 1, 31))


def test_the_run_catalog_holds_the_waivers_and_cores_catalog_knows_none(skewed, spec_copy):
    write_waivers(spec_copy, waiver())
    catalog = load_catalog(spec_copy)
    assert isinstance(catalog, RunCatalog) and [(type(w), w.id) for w in catalog.waivers] == [(Waiver, "SKW-0001")]
    assert "waivers" not in {f.name for f in dataclasses.fields(Catalog)}  # core's catalog: specs only
    core = load_specs(spec_copy)
    assert not hasattr(core, "waivers")
    wrapped = RunCatalog.of(core)
    assert (wrapped.waivers, wrapped.digest, [s.id for s in wrapped.specs]) == ([], core.digest, [s.id for s in core.specs])


# ---- the engine applies them (through `opconform run`) ----------------------------------

def test_without_waivers_the_skew_fails(capsys, skewed, spec_copy, tmp_path):
    code, out, records = run(capsys, spec_copy, tmp_path)
    assert code == 1 and "3 unexpected failure(s)" in out
    assert {r["dtype"] for r in records if r["status"] == "fail"} == {"float32"}


def test_an_xfail_waiver_turns_its_failures_into_waived(capsys, skewed, spec_copy, tmp_path):
    write_waivers(spec_copy, waiver())
    code, out, records = run(capsys, spec_copy, tmp_path)
    waived = [r for r in records if r["status"] == "waived"]
    assert code == 0 and "verdict: PASS" in out
    assert len(waived) == 3 and all(r["waiver"] == "SKW-0001" and r["dtype"] == "float32" for r in waived)
    assert waived[0]["detail"].startswith("waived by SKW-0001 (xfail): float32 results are scaled")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    checked = sum(1 for r in records if r["check"] == "gradient")  # the reference's gradient checks pass too
    assert summary["totals"]["waived"] == 3 and summary["totals"]["pass"] == 9 + checked
    assert summary["waivers"]["SKW-0001"]["covered"] == 3 and summary["waivers"]["SKW-0001"]["waived"] == 3


def test_a_waiver_expecting_another_failure_kind_does_not_waive(capsys, skewed, spec_copy, tmp_path):
    write_waivers(spec_copy, waiver(failure="crash"))
    code, out, records = run(capsys, spec_copy, tmp_path)
    assert code == 1
    failed = [r for r in records if r["status"] == "fail"]
    assert len(failed) == 3 and "waiver SKW-0001 does not cover it: it expects crash, observed wrong_values" in failed[0]["detail"]


def test_an_expected_failure_that_passes_fails_the_gate(capsys, skewed, spec_copy, tmp_path):
    write_waivers(spec_copy, waiver(match_dtypes=["float64"]))  # float64 is exact: nothing fails there
    code, out, records = run(capsys, spec_copy, tmp_path)
    assert code == 1
    assert "expected failure SKW-0001 passed in 3 case(s): remove waiver SKW-0001" in out
    xpass = [r for r in records if r.get("failure") == "xpass"]
    assert len(xpass) == 3 and xpass[0]["status"] == "fail" and "remove waiver SKW-0001" in xpass[0]["detail"]


def test_a_waiver_that_waives_nothing_is_stale(capsys, skewed, spec_copy, tmp_path):
    write_waivers(spec_copy, waiver(), waiver(id="SKW-0002", kind="divergence", match_dtypes=["float64"]))
    code, out, _ = run(capsys, spec_copy, tmp_path)
    assert code == 1
    assert "stale waiver SKW-0002 (divergence): it covered 3 case(s) in this run and waived none" in out
    assert "SKW-0001" not in out.split("verdict")[1]


def test_an_expired_waiver_warns_then_fails(capsys, skewed, spec_copy, tmp_path):
    recent = (datetime.date.today() - datetime.timedelta(days=3)).isoformat()
    write_waivers(spec_copy, waiver(review_by=recent))
    code, out, _ = run(capsys, spec_copy, tmp_path)
    assert code == 0 and f"warning: waiver SKW-0001 is past its review date {recent}" in out
    write_waivers(spec_copy, waiver(review_by="2000-01-01"))
    code, out, records = run(capsys, spec_copy, tmp_path)
    assert code == 1 and "expired waiver SKW-0001: review_by 2000-01-01 passed and the grace period ended 2000-01-15" in out
    assert {r["status"] for r in records} == {"pass", "waived"}  # it still waives; the gate fails on the date


def test_a_tolerance_waiver_widens_only_as_far_as_it_says(capsys, skewed, spec_copy, tmp_path):
    write_waivers(spec_copy, waiver(kind="tolerance", failure=None, budget_multiplier=4.0, observed_budget=3.0))
    code, out, records = run(capsys, spec_copy, tmp_path)
    assert code == 0, out
    assert [r["status"] for r in records if r["dtype"] == "float32" and r["check"] != "gradient"] == ["waived"] * 3
    write_waivers(spec_copy, waiver(kind="tolerance", failure=None, budget_multiplier=1.5, observed_budget=1.4))
    code, out, records = run(capsys, spec_copy, tmp_path)
    failed = [r for r in records if r["status"] == "fail"]
    assert code == 1 and len(failed) == 3
    assert "waiver SKW-0001 does not cover it: dX uses x" in failed[0]["detail"] and "allows x1.5" in failed[0]["detail"]


def test_a_tolerance_waiver_reports_a_ratchet(capsys, skewed, spec_copy, tmp_path):
    write_waivers(spec_copy, waiver(kind="tolerance", failure=None, budget_multiplier=20.0, observed_budget=15.0))
    code, out, _ = run(capsys, spec_copy, tmp_path)
    assert code == 0 and "warning: waiver SKW-0001: worst error now x" in out and "lower budget_multiplier" in out


def test_a_skip_waiver_keeps_the_cases_off_the_backend(capsys, skewed, spec_copy, tmp_path):
    write_waivers(spec_copy, waiver(kind="skip", failure=None, because="crash"))
    code, out, records = run(capsys, spec_copy, tmp_path)
    assert code == 0
    assert "float32" not in SkewedBackend.calls and SkewedBackend.calls.count("float64") == 3
    skipped = [r for r in records if r["status"] == "waived"]
    assert len(skipped) == 3 and skipped[0]["detail"].startswith("not run: waived by SKW-0001 (skip, crash)")


def test_a_waiver_never_overrides_a_known_divergence(capsys, spec_copy, tmp_path):
    # ORT's GeluGrad inf results are a spec's known divergence: a waiver on the same cases waives nothing.
    write_waivers(spec_copy, waiver(match_op="GeluGrad", match_cases=["infinities/*"], match_dtypes=["float32"]),
                  backend="ort")
    code = main(["run", "--specs", str(spec_copy), "--no-builtin-specs", "--ops", "GeluGrad", "--backends", "ort",
                 "--cases", "*infinities/*", "--out", str(tmp_path / "r"), "--no-progress"])
    out = capsys.readouterr().out
    records = read_results(tmp_path / "r")
    assert {r["status"] for r in records if r["dtype"] == "float32"} == {"divergent"}
    assert code == 1 and "stale waiver SKW-0001" in out


# ---- propose --------------------------------------------------------------------------------

def test_propose_prints_drafts_that_validation_rejects_until_filled_in(capsys, skewed, spec_copy, tmp_path):
    code, out, _ = run(capsys, spec_copy, tmp_path)
    assert code == 1
    before = sorted((p.name, p.read_bytes()) for p in spec_copy.rglob("*") if p.is_file())
    assert main(["waivers", "--specs", str(spec_copy), "--no-builtin-specs", "propose", str(tmp_path / "run")]) == 0
    draft = capsys.readouterr().out
    assert sorted((p.name, p.read_bytes()) for p in spec_copy.rglob("*") if p.is_file()) == before  # wrote nothing
    data = yaml.safe_load(draft)
    [entry] = data["waivers"]
    assert data["backend"] == "skewed" and entry["id"] == "SKEWED-0001" and entry["kind"] == "xfail"
    assert entry["match"] == {"op": "TanhGrad", "dtypes": ["float32"], "cases": ["basic/*"], "outputs": ["dX"]}
    assert entry["failure"] == "wrong_values" and entry["reason"] == "" and entry["tracking"] == ""
    assert "# worst error x" in draft  # the evidence a person needs to choose between xfail and tolerance

    (spec_copy / "_waivers").mkdir(exist_ok=True)
    (spec_copy / "_waivers" / "skewed.yaml").write_text(draft)
    assert main(["validate", "--specs", str(spec_copy), "--no-builtin-specs"]) == 1
    err = capsys.readouterr().err
    assert "skewed.yaml: waivers[0].reason: empty: write why" in err and "waivers[0].tracking: empty" in err

    edit(spec_copy / "_waivers" / "skewed.yaml", 'reason: ""', 'reason: "float32 path multiplies by 1 + 3e-4; fix tracked"')
    edit(spec_copy / "_waivers" / "skewed.yaml", 'tracking: ""', "tracking: https://github.com/example/opconform/issues/2")
    code, out, records = run(capsys, spec_copy, tmp_path)
    assert code == 0 and sum(r["status"] == "waived" for r in records) == 3


def test_propose_drafts_a_skip_for_crashes():
    from harness.run.waivers import propose

    base = {"op": "ConvGrad", "backend": "ort", "dtype": "float32", "group": "bad_pads", "check": "reference",
            "outputs": {}, "detail": "worker killed by SIGSEGV"}
    records = [{**base, "case": "bad_pads/pads=1x1", "status": "crashed", "failure": "crash"},
               {**base, "case": "bad_pads/pads=0x0", "status": "pass", "failure": None}]
    entry = yaml.safe_load(propose(records, []))["waivers"][0]
    assert entry["kind"] == "skip" and entry["because"] == "crash"
    assert entry["match"]["cases"] == ["bad_pads/pads=1x1"]  # not the whole group: one of its cases passed
