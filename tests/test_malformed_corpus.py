"""Bad input costs one line, never a run: every malformed spec or waiver in tests/corpus/malformed.json
(written by tests/corpus/make_malformed.py) makes `validate` exit 1 and `run` exit 2 with exactly one
line naming the file and the field; no traceback, no hang, nothing accepted."""
import base64
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, SPECS

from harness.cli import main

CORPUS = Path(__file__).parent / "corpus"
DOC = json.loads((CORPUS / "malformed.json").read_text())
VARIANTS = {v["name"]: v for v in DOC["variants"]}


def base_tree(root: Path) -> Path:
    specs = root / "specs"
    for name in ("_defaults/tolerances.yaml", "com.microsoft/ReluGrad.yaml", "com.microsoft/TanhGrad.yaml"):
        (specs / name).parent.mkdir(parents=True, exist_ok=True)
        (specs / name).write_bytes((SPECS / name).read_bytes())
    (specs / "_waivers").mkdir()
    (specs / "_waivers" / "ort.yaml").write_text(DOC["base_waiver"])
    return specs


def materialise(variant: dict, root: Path) -> Path:
    specs = base_tree(root)
    for name, content in variant["files"].items():
        path = specs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()
        if isinstance(content, str):
            path.write_text(content)
        elif "b64" in content:
            path.write_bytes(base64.b64decode(content["b64"]))
        elif "pad" in content:
            path.write_text(content["pad"] + "#" * (content["bytes"] - len(content["pad"])) + "\n")
        elif content["special"] == "directory":
            (path / "inside.yaml").parent.mkdir()
            (path / "inside.yaml").write_text("op: X\n")
        elif content["special"] == "dangling_symlink":
            path.symlink_to(root / "nowhere.yaml")
    return specs


@pytest.fixture(autouse=True)
def corpus_hooks_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(CORPUS))


def test_the_corpus_is_large_and_current():
    sys.path.insert(0, str(CORPUS))
    try:
        import make_malformed
    finally:
        sys.path.remove(str(CORPUS))
    assert len(DOC["variants"]) >= 60
    assert make_malformed.variants() == DOC["variants"], "run python tests/corpus/make_malformed.py"


def test_the_base_tree_is_valid(tmp_path, capsys):
    assert main(["validate", "--specs", str(base_tree(tmp_path)), "--no-builtin-specs"]) == 0, capsys.readouterr().err


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _problem_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip() and not line.endswith("problem(s) found")]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_malformed_file_costs_one_line(name, tmp_path, capsys):
    variant = VARIANTS[name]
    specs = materialise(variant, tmp_path)
    started = time.process_time()  # CPU: a loaded machine must not fail it
    code = main(["validate", "--specs", str(specs), "--no-builtin-specs"])
    out, err = capsys.readouterr()
    assert time.process_time() - started < 5
    assert code == variant["exit_validate"], err
    lines = _problem_lines(err)
    assert len(lines) == 1, err
    line = lines[0]
    assert "Traceback" not in err and variant["file"] in line, line
    assert f": {variant['field']}" in line, line
    assert variant["says"] in line, line
    assert "Beautiful is better than ugly" not in out + err  # `this` was never imported
    if variant["exit_run"] is None:
        return
    code = main(["run", "--specs", str(specs), "--no-builtin-specs", "--backends", "reference", "--tier", "smoke", "--no-progress",
                 "--no-report", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == variant["exit_run"], err
    assert len(_problem_lines(err)) == 1 and "opconform: spec error:" in err, err
    assert not (tmp_path / "run").exists()  # nothing ran


def test_validate_of_the_alias_chain_ends_in_under_5_s(tmp_path):
    specs = materialise(VARIANTS["alias_chain"], tmp_path)
    started = _children_cpu()
    done = subprocess.run([sys.executable, "-m", "harness.cli", "validate", "--specs", str(specs), "--no-builtin-specs"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert _children_cpu() - started < 5  # CPU of the validate process, whatever the machine's load
    assert done.returncode == 1 and "aliases" in done.stderr and "Traceback" not in done.stderr


def test_the_memory_budget_can_be_raised(tmp_path, capsys):
    specs = base_tree(tmp_path)
    path = specs / "com.microsoft" / "ReluGrad.yaml"
    path.write_text(path.read_text().replace("params: {shape: [[7], [3, 4], [2, 3, 5]]}", "params: {shape: [[1024, 1024]]}"))
    assert main(["validate", "--specs", str(specs), "--no-builtin-specs", "--max-case-memory", "4MiB"]) == 1
    assert "over the 4.0 MiB budget per case" in capsys.readouterr().err
    assert main(["validate", "--specs", str(specs), "--no-builtin-specs", "--max-case-memory", "64MiB"]) == 0
