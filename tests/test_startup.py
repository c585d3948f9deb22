"""Start-up that does not grow with the spec count: only the selected specs load, through a cache of
checked specs that every input of a spec's outcome invalidates; `opconform bench --startup`."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, SPECS, edit

from harness.bench import startup
from harness.cli import main
from harness.core import spec_checks, spec_loader
from harness.core.spec_loader import SpecSources, load_catalog
from harness.spec import cache
from harness.spec.errors import SpecError


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.delenv("OPCONFORM_NO_CACHE", raising=False)
    monkeypatch.delenv("OPCONFORM_SPECS", raising=False)
    return home


def loaded(root: Path, ops=("ReluGrad",)):
    catalog = load_catalog(sources=SpecSources((root,), builtin=False), ops=list(ops) if ops else None)
    return catalog, catalog.loader.parsed, catalog.loader.cached


def entries(home: Path) -> list[Path]:
    return sorted((home / "opconform").rglob("*.pickle"))


def test_the_loader_and_the_checks_agree_on_the_budget_per_case():
    assert spec_loader.DEFAULT_MAX_CASE_BYTES == spec_checks.DEFAULT_MAX_CASE_BYTES


def test_the_second_load_comes_from_the_cache_without_parsing(spec_copy, cache_home, monkeypatch):
    first, parsed, cached = loaded(spec_copy)
    assert (parsed, cached) == (1, 0) and len(entries(cache_home)) == 1
    monkeypatch.setattr(spec_loader, "load_spec", lambda *a, **k: pytest.fail("the cached spec was parsed again"))
    second, parsed, cached = loaded(spec_copy)
    assert (parsed, cached) == (0, 1)
    assert second.by_op("ReluGrad") == first.by_op("ReluGrad")
    assert second.digest == first.digest


def test_a_changed_spec_file_is_parsed_again(spec_copy):
    loaded(spec_copy)
    edit(spec_copy / "com.microsoft" / "ReluGrad.yaml", "params: {shape: [[7]", "params: {shape: [[9]")
    catalog, parsed, _ = loaded(spec_copy)
    assert parsed == 1 and catalog.by_op("ReluGrad").cases.groups[0].params["shape"][0] == [9]


def test_changed_defaults_or_budget_are_a_new_entry(spec_copy):
    loaded(spec_copy)
    edit(spec_copy / "_defaults" / "tolerances.yaml", "float64: {atol: 1.0e-10", "float64: {atol: 2.0e-10")
    assert loaded(spec_copy)[1] == 1
    catalog = load_catalog(sources=SpecSources((spec_copy,), builtin=False), ops=["ReluGrad"], max_case_bytes=1 << 26)
    assert catalog.loader.parsed == 1


HOOKS = '''import numpy as np


def relu_grad(dY, X):
    return dY * (X > 0)


def relu(X):
    return np.maximum(X, 0)
'''


def test_a_changed_hook_module_is_parsed_again(tmp_path, monkeypatch):
    """The hook modules a spec names are part of its entry: an edit there is looked at, even when the
    spec was refused because of that module (a reference that only raises NotImplementedError)."""
    package = tmp_path / "code" / "teamhooks"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text(HOOKS.replace("return dY * (X > 0)", "raise NotImplementedError"))
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    team = tmp_path / "team"
    (team / "com.microsoft").mkdir(parents=True)
    (team / "_defaults").mkdir()
    (team / "_defaults" / "hooks.yaml").write_text("packages: [teamhooks]\n")
    text = (SPECS / "com.microsoft" / "ReluGrad.yaml").read_text().replace("\nop: ReluGrad\n", "\nop: TeamReluGrad\n")
    (team / "com.microsoft" / "TeamReluGrad.yaml").write_text(
        text.replace('reference: "reference.ops.activations:relu_grad"', 'reference: "teamhooks.ops:relu_grad"'))
    for attempt in range(2):  # refused, then refused again from the cache
        with pytest.raises(SpecError, match="only raises NotImplementedError"):
            loaded(team, ["TeamReluGrad"])
    (package / "ops.py").write_text(HOOKS)
    monkeypatch.delitem(sys.modules, "teamhooks.ops", raising=False)
    from harness.spec.dotted import resolve

    resolve.cache_clear()
    catalog, parsed, cached = loaded(team, ["TeamReluGrad"])
    assert (parsed, cached) == (1, 0) and catalog.by_op("TeamReluGrad").reference == "teamhooks.ops:relu_grad"
    assert loaded(team, ["TeamReluGrad"])[1:] == (0, 1)


def test_a_corrupted_or_foreign_cache_entry_is_ignored_and_rewritten(spec_copy, cache_home):
    loaded(spec_copy, ["ReluGrad", "TanhGrad"])
    first, second = entries(cache_home)
    first.write_bytes(b"\x80\x05 not a pickle at all")
    second.write_bytes(pickle.dumps({"format": cache.FORMAT, "key": "someone else's", "hooks": {}, "value": 1}))
    catalog, parsed, cached = loaded(spec_copy, ["ReluGrad", "TanhGrad"])
    assert (parsed, cached) == (2, 0) and {s.op for s in catalog.specs} == {"ReluGrad", "TanhGrad"}
    assert loaded(spec_copy, ["ReluGrad", "TanhGrad"])[1:] == (0, 2)  # rewritten whole


def test_opconform_no_cache_disables_it_and_an_unwritable_cache_is_no_cache(spec_copy, cache_home, monkeypatch):
    monkeypatch.setenv("OPCONFORM_NO_CACHE", "1")
    assert loaded(spec_copy)[1:] == (1, 0) and loaded(spec_copy)[1:] == (1, 0)
    assert not entries(cache_home)
    monkeypatch.delenv("OPCONFORM_NO_CACHE")
    blocker = cache_home.parent / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert loaded(spec_copy)[1:] == (1, 0)  # loads; only slower


def test_only_the_selected_specs_of_200_are_parsed(tmp_path, monkeypatch, capsys):
    many = tmp_path / "many"
    assert startup.make_spec_set(many, 200) == 200
    calls = []
    real = spec_loader.load_spec
    monkeypatch.setattr(spec_loader, "load_spec", lambda path, *a, **k: calls.append(path.stem) or real(path, *a, **k))
    code = main(["run", "--specs", str(many), "--no-builtin-specs", "--ops", "ReluGrad", "--backends", "reference",
                 "--tier", "smoke", "--no-report", "--out", str(tmp_path / "run")])
    assert code == 0, capsys.readouterr().err
    assert calls == ["ReluGrad"]
    catalog, parsed, cached = loaded(many)
    assert (parsed, cached) == (0, 1) and len(catalog.all_ops) == 200 and not catalog.complete


def test_the_renamed_copies_are_valid_specs(tmp_path, capsys):
    """make_spec_set's copies are real specs (each built-in spec copied once here), not files that merely exist."""
    copies = tmp_path / "copies"
    count = len([p for p in SPECS.glob("*/*.yaml") if not p.parent.name.startswith("_")])
    startup.make_spec_set(copies, count)
    assert main(["validate", "--specs", str(copies), "--no-builtin-specs"]) == 0, capsys.readouterr().err


def _cpu_of_run(specs: Path, env: dict, out: Path) -> float:
    argv = [sys.executable, "-m", "harness.cli", "run", "--ops", "ReluGrad", "--backends", "reference", "--tier",
            "smoke", "--no-report", "--no-progress", "--out", str(out), "--specs", str(specs), "--no-builtin-specs"]
    cpu, _, done = startup.time_command(argv, env, out.parent)
    assert done.returncode == 0, done.stderr
    return cpu


def test_200_specs_start_in_about_the_cpu_time_of_one(tmp_path, cache_home):
    """CPU time of the whole process tree, never wall time; a generous margin (the goal is 1.2x)."""
    one, many = tmp_path / "one", tmp_path / "many"
    startup.make_spec_set(one, 1)
    startup.make_spec_set(many, 200)
    env = {**{k: v for k, v in os.environ.items() if k != "OPCONFORM_SPECS"}, "XDG_CACHE_HOME": str(cache_home)}
    runs = iter(range(100))
    for specs in (one, many):  # warm the cache
        _cpu_of_run(specs, env, tmp_path / f"run{next(runs)}")
    cpu_one = min(_cpu_of_run(one, env, tmp_path / f"run{next(runs)}") for _ in range(2))
    cpu_many = min(_cpu_of_run(many, env, tmp_path / f"run{next(runs)}") for _ in range(2))
    assert cpu_many < 1.5 * cpu_one, (cpu_one, cpu_many)


def test_the_first_progress_line_comes_before_the_heavy_imports(tmp_path, cache_home):
    """Order, not time: `loading 1 spec` is printed before numpy, pydantic or the spec models are imported."""
    env = {**{k: v for k, v in os.environ.items() if k != "OPCONFORM_SPECS"}, "XDG_CACHE_HOME": str(cache_home)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "harness.cli", "run", "--ops", "ReluGrad",
                           "--backends", "reference", "--tier", "smoke", "--no-report", "--out", str(tmp_path / "run")],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("opconform: loading 1 spec (ReluGrad)"))
    heavy = [line for line in lines[:first] if line.rstrip().endswith(("| numpy", "| pydantic", "| harness.spec.model"))]
    assert not heavy, heavy
    assert any(line.startswith("opconform: loaded 1 spec in") for line in lines[first:])


def test_the_startup_table_and_the_goal_are_judged_on_cpu_time():
    rows = [startup.Row("one spec", 1, "warm", 0.70, 9.0, [0.70], [9.0]),
            startup.Row("built-in", 27, "warm", 0.80, 0.1, [0.80], [0.1]),
            startup.Row("200 specs", 200, "warm", 0.90, 0.1, [0.90], [0.1]),
            startup.Row("200 specs", 200, "cold", 3.00, 0.1, [3.00], [0.1])]
    lines = startup.verdicts(rows)
    assert lines[0].startswith("built-in: 0.80 s CPU warm, x1.14 of one spec") and lines[0].endswith("met")
    assert lines[1].startswith("200 specs: 0.90 s CPU warm, x1.29") and lines[1].endswith("missed")
    text = startup.table(rows)
    assert text.splitlines()[0].split() == ["spec", "set", "specs", "cache", "CPU", "s", "wall", "s", "CPU", "runs"]
    assert "200 specs    200  cold    3.00" in text


def test_a_spec_with_problems_is_never_cached(spec_copy, cache_home, monkeypatch):
    """A problem may belong to this process (a hook out of CPU time on a loaded machine): it is looked at
    afresh by the next load, never served from the cache to later runs and other workers."""
    real = spec_loader.load_spec
    monkeypatch.setattr(spec_loader, "load_spec", lambda path, *a, **k: (
        None, [spec_loader.Problem(str(path), "cases.shapes", "hook ran out of its 2 s of CPU")]))
    with pytest.raises(SpecError):
        loaded(spec_copy)
    assert entries(cache_home) == []
    monkeypatch.setattr(spec_loader, "load_spec", real)
    catalog, parsed, cached = loaded(spec_copy)  # the machine is quiet again: the spec loads
    assert (parsed, cached) == (1, 0) and catalog.by_op("ReluGrad")
