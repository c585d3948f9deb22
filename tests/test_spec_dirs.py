"""A team's spec directories on top of the built-in specs: new ops, overlays, defaults, waivers, name
clashes, --no-builtin-specs and $OPCONFORM_SPECS; a broken spec costs its own op only."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SPECS

from harness.cli import main
from harness.core import spec_loader
from harness.core.spec_loader import SpecSources, load_catalog
from harness.pytest_plugin.suite import generated_sources, specs_dir_from
from harness.report.repro import run_flags

RUN = ["--backends", "reference", "--tier", "smoke", "--no-report", "--no-progress"]
BUILTIN = len([p for p in SPECS.glob("*/*.yaml") if not p.parent.name.startswith("_")])
OVERLAY = """extends: TanhGrad
groups:
  - name: team_wide
    tier: smoke
    dtypes: [float32]
    params: {shape: [[3, 257]]}
"""


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def own_cache(cache_home, monkeypatch):
    """A cache of checked specs of this module's own (entries are keyed by content: sharing them is safe),
    and no spec directories from the caller's environment."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    monkeypatch.delenv("OPCONFORM_SPECS", raising=False)
    monkeypatch.delenv("OPCONFORM_NO_CACHE", raising=False)


def renamed(name: str, source: str = "ReluGrad") -> str:
    text = (SPECS / "com.microsoft" / f"{source}.yaml").read_text()
    assert f"\nop: {source}\n" in text
    return text.replace(f"\nop: {source}\n", f"\nop: {name}\n", 1)


@pytest.fixture
def team(tmp_path) -> Path:
    """A team directory: one new op (no _defaults: the built-in tolerances apply) and an overlay."""
    root = tmp_path / "team"
    (root / "com.microsoft").mkdir(parents=True)
    (root / "com.microsoft" / "TeamReluGrad.yaml").write_text(renamed("TeamReluGrad"))
    (root / "com.microsoft" / "TanhGrad.overlay.yaml").write_text(OVERLAY)
    return root


def results(run_dir: Path) -> list[dict]:
    from harness.run.rundir import read_results

    return read_results(run_dir)


def test_a_team_directory_adds_its_ops_and_groups_beside_the_built_in_ones(team, tmp_path, capsys):
    catalog = load_catalog(sources=SpecSources((team,)))
    assert {"TeamReluGrad", "ReluGrad", "TanhGrad"} <= {s.op for s in catalog.specs}
    tanh = catalog.by_op("TanhGrad")
    assert [g.name for g in tanh.cases.groups][-1] == "team_wide"
    assert catalog.overlays[tanh.id] == [team / "com.microsoft" / "TanhGrad.overlay.yaml"]
    assert catalog.root_of(catalog.by_op("TeamReluGrad")) == team and catalog.root_of(tanh) == SPECS
    # a team spec without _defaults/ is judged with the built-in tolerances
    assert catalog.tolerance(catalog.by_op("TeamReluGrad"), "float16") == catalog.tolerance(catalog.by_op("ReluGrad"), "float16")

    code = main(["run", "--specs", str(team), "--ops", "TeamReluGrad,TanhGrad,ReluGrad", *RUN, "--out", str(tmp_path / "r")])
    assert code == 0, capsys.readouterr()
    records = results(tmp_path / "r")
    assert {r["op"] for r in records} == {"TeamReluGrad", "TanhGrad", "ReluGrad"}
    assert any(r["op"] == "TanhGrad" and r["case"] == "team_wide/shape=3x257" for r in records)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["spec_sources"] == {"builtin": True, "dirs": [str(team.resolve())]}
    # the command that reruns a case of this run names the team directory again
    assert run_flags(summary, SPECS)[:2] == ["--specs", str(team.resolve())]


def test_opconform_specs_adds_directories_like_specs(team, tmp_path, monkeypatch, capsys):
    other = tmp_path / "other"
    (other / "com.microsoft").mkdir(parents=True)
    (other / "com.microsoft" / "OtherReluGrad.yaml").write_text(renamed("OtherReluGrad"))
    monkeypatch.setenv("OPCONFORM_SPECS", os.pathsep.join([str(team), str(other)]))
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "TeamReluGrad" in out and "OtherReluGrad" in out and f"{BUILTIN + 2} specs valid" in out


def test_a_spec_with_a_built_in_ops_name_is_one_line_naming_both_files(team, capsys):
    (team / "com.microsoft" / "GeluGrad.yaml").write_text(renamed("GeluGrad", "GeluGrad"))
    code = main(["run", "--specs", str(team), "--ops", "ReluGrad", *RUN])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "GeluGrad.yaml: op: GeluGrad is a built-in spec in" in err
    assert err.rstrip().split(" in ", 1)[1].startswith(spec_loader.shown(SPECS / "com.microsoft" / "GeluGrad.yaml") + ";")
    assert "GeluGrad.overlay.yaml (extends: GeluGrad)" in err  # what to write instead


def test_the_same_directory_as_the_built_in_specs_is_not_a_clash(capsys):
    assert main(["validate", "--specs", str(SPECS)]) == 0  # named twice, loaded once
    assert f"{BUILTIN} specs valid" in capsys.readouterr().out


def test_an_overlay_of_an_unknown_op_is_one_line(team, capsys):
    (team / "com.microsoft" / "TanhGard.overlay.yaml").write_text(OVERLAY.replace("TanhGrad", "TanhGard"))
    code = main(["validate", "--specs", str(team)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "problem(s) found" not in line]
    assert code == 1 and len(lines) == 1, err
    assert "TanhGard.overlay.yaml: extends: unknown op 'TanhGard'; did you mean 'TanhGrad'?" in lines[0]


def test_overlay_groups_are_validated_like_spec_groups_and_named_in_the_overlay(team, capsys):
    path = team / "com.microsoft" / "TanhGrad.overlay.yaml"
    path.write_text(OVERLAY.replace("params: {shape: [[3, 257]]}", "params: {shape: [[3, 257]], alpha: [1]}"))
    code = main(["run", "--specs", str(team), "--ops", "TanhGrad", *RUN])
    err = capsys.readouterr().err
    assert code == 2 and "TanhGrad.overlay.yaml: groups[0].params.alpha: unknown case parameter 'alpha'" in err, err
    path.write_text(OVERLAY.replace("name: team_wide", "name: basic"))  # a group the spec has already
    assert main(["validate", "--specs", str(team)]) == 1
    assert "TanhGrad.overlay.yaml: groups[0].name: group name 'basic' is used twice" in capsys.readouterr().err
    path.write_text(OVERLAY.replace("extends: TanhGrad", "extends: TanhGrad\nwhatever: 1"))
    assert main(["validate", "--specs", str(team)]) == 1
    assert "TanhGrad.overlay.yaml: whatever: unknown field" in capsys.readouterr().err


def test_no_builtin_specs_runs_the_team_directory_alone(team, tmp_path, capsys):
    (team / "com.microsoft" / "TanhGrad.overlay.yaml").unlink()  # nothing to extend without the built-in specs
    assert main(["validate", "--specs", str(team), "--no-builtin-specs"]) == 0
    assert capsys.readouterr().out.startswith("1 specs valid: TeamReluGrad")
    assert main(["run", "--specs", str(team), "--no-builtin-specs", "--ops", "ReluGrad", *RUN]) == 2
    assert "unknown op 'ReluGrad'; did you mean 'TeamReluGrad'?" in capsys.readouterr().err
    assert main(["run", "--no-builtin-specs", *RUN]) == 2
    assert "no spec directory left" in capsys.readouterr().err


def test_a_team_directorys_defaults_apply_to_its_own_specs_only(team):
    (team / "_defaults").mkdir()
    (team / "_defaults" / "tolerances.yaml").write_text("tolerances:\n  float32: {atol: 0.5, rtol: 0.0}\n")
    catalog = load_catalog(sources=SpecSources((team,)))
    mine, builtin = catalog.by_op("TeamReluGrad"), catalog.by_op("ReluGrad")
    assert (catalog.tolerance(mine, "float32").atol, catalog.tolerance(builtin, "float32").atol) == (0.5, 1e-5)
    assert catalog.tolerance(mine, "float16") == catalog.tolerance(builtin, "float16")  # not overridden: built in


def test_a_team_directorys_waivers_are_read(team, capsys):
    (team / "_waivers").mkdir()
    (team / "_waivers" / "reference.yaml").write_text(
        "backend: reference\nwaivers:\n  - id: TEAM-1\n    kind: skip\n    because: too_slow\n"
        "    match: {op: TeamReluGrad, cases: ['basic/*']}\n    reason: the team's own example of a skip waiver\n"
        "    tracking: https://example.com/issues/1\n    review_by: 2099-01-01\n")
    from harness.run.catalog import load

    catalog = load(sources=SpecSources((team,)), ops=["TeamReluGrad"])
    assert [w.id for w in catalog.waivers] == ["TEAM-1"]
    (team / "_waivers" / "reference.yaml").write_text(
        (team / "_waivers" / "reference.yaml").read_text().replace("op: TeamReluGrad", "op: NoSuchGrad"))
    assert main(["validate", "--specs", str(team)]) == 1
    assert "reference.yaml: waivers[0].match.op: unknown op 'NoSuchGrad'" in capsys.readouterr().err


def broken(root: Path, op: str = "TanhGrad") -> None:
    path = root / "com.microsoft" / f"{op}.yaml"
    path.write_text(path.read_text().replace("role: grad_output", "role: gradient", 1))


def test_a_broken_spec_costs_its_own_op_only(spec_copy, tmp_path, capsys):
    broken(spec_copy)
    args = ["--specs", str(spec_copy), "--no-builtin-specs", *RUN]
    assert main(["run", *args, "--ops", "ReluGrad,GeluGrad", "--out", str(tmp_path / "ok")]) == 0
    captured = capsys.readouterr()
    assert len([line for line in captured.err.splitlines() if "TanhGrad" in line]) <= 1  # at most a warning
    assert {r["op"] for r in results(tmp_path / "ok")} == {"ReluGrad", "GeluGrad"}
    # selecting it, by name or by a glob, fails as before (exit 2, one line); so does validate
    for ops in ("TanhGrad", "*Grad"):
        assert main(["run", *args, "--ops", ops, "--out", str(tmp_path / ops.strip("*"))]) == 2
        assert "TanhGrad.yaml: inputs[0].role: got 'gradient'" in capsys.readouterr().err
    assert main(["validate", "--specs", str(spec_copy), "--no-builtin-specs"]) == 1
    assert "TanhGrad.yaml: inputs[0].role" in capsys.readouterr().err


def test_an_unknown_op_is_answered_from_file_names_before_any_spec_loads(spec_copy, monkeypatch, capsys):
    broken(spec_copy)
    (spec_copy / "com.microsoft" / "GeluGrad.yaml").write_bytes(b"\x00 not even text")

    def never(*args, **kwargs):
        raise AssertionError("a spec was read to answer an unknown op")

    monkeypatch.setattr(spec_loader, "load_spec", never)
    monkeypatch.setattr(spec_loader, "read_yaml", never)
    assert main(["run", "--specs", str(spec_copy), "--no-builtin-specs", "--ops", "ReluGrd", *RUN]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opconform: error: unknown op 'ReluGrd'; did you mean 'ReluGrad'?") and len(err.splitlines()) == 1


def test_an_unknown_op_is_answered_without_importing_the_spec_machinery(spec_copy):
    """In a fresh interpreter: the answer comes before pydantic, numpy or the spec models are imported."""
    broken(spec_copy)
    code = ("import sys; from harness.cli import main; code = main(['run', '--specs', sys.argv[1], '--no-builtin-specs', "
            "'--ops', 'ReluGrd']); print(sorted(m for m in ('pydantic', 'numpy', 'onnx', 'harness.spec.model') "
            "if m in sys.modules)); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code, str(spec_copy)], capture_output=True, text=True, cwd=REPO,
                          env={k: v for k, v in os.environ.items() if k != "OPCONFORM_SPECS"}, timeout=120)
    assert done.returncode == 2 and "did you mean 'ReluGrad'?" in done.stderr, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_suite_generated_from_a_team_directory_records_it(team, tmp_path):
    out = tmp_path / "generated"
    assert main(["gen-tests", "--specs", str(team), "--out", str(out)]) == 0
    conftest = (out / "conftest.py").read_text()
    assert "dirs=[here / " in conftest and "builtin=True" in conftest
    files = {p.name for p in out.glob("test_*.py")}
    assert {"test_TeamReluGrad.py", "test_TanhGrad.py", "test_ReluGrad.py"} <= files
    assert "team_wide" in (out / "test_TanhGrad.py").read_text()
    assert main(["gen-tests", "--specs", str(team), "--out", str(out), "--check"]) == 0
    (team / "com.microsoft" / "TanhGrad.overlay.yaml").write_text(OVERLAY.replace("257", "258"))
    assert main(["gen-tests", "--specs", str(team), "--out", str(out), "--check"]) == 1  # the overlay is in the hash


def test_the_pytest_plugin_resolves_spec_directories_as_the_cli_does(team, monkeypatch):
    assert specs_dir_from(None, None) is None  # nothing says where yet: the generated conftest will
    assert specs_dir_from([team], None) == SpecSources((team,))
    assert specs_dir_from([team], None, no_builtin=True) == SpecSources((team,), builtin=False)
    recorded = generated_sources(SPECS, [team], builtin=True)
    assert recorded == SpecSources((team.resolve(),)) or recorded == SpecSources((team,))
    assert specs_dir_from(None, recorded).dirs == recorded.dirs
    # a conftest written before team directories names one complete tree: the built-in one, or a copy used alone
    assert generated_sources(SPECS) == SpecSources()
    assert generated_sources(team) == SpecSources((team,), builtin=False)
    monkeypatch.setenv("OPCONFORM_SPECS", str(team))
    assert specs_dir_from(None, None) == SpecSources((team,))


def test_gen_tests_refuses_a_conftest_it_did_not_write_in_one_line(tmp_path, capsys):
    out = tmp_path / "generated"
    out.mkdir()
    (out / "conftest.py").write_text("# the team's own conftest\n")
    assert main(["gen-tests", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opconform: error: ") and "was not written by gen-tests" in err and len(err.splitlines()) == 1
