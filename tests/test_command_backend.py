"""Command backends: a program per case, reading and writing an ONNX backend-test directory. Its exit
code says rejected (65) or unsupported (69); a signal, another exit code, a hang or a missing or
unreadable output is a crash or a hang of that case, and the run goes on."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import backends as registry
from harness.backends.command import PLACEHOLDERS, CommandBackend, parse_template
from harness.run.catalog import load as load_catalog
from harness.run.rundir import read_results
from harness.run.runner import RunError, RunOptions, run

ROOT = Path(__file__).parent.parent
EXAMPLE = "examples/command-backend/relu_grad.sh {dataset} {dtype}"


@pytest.fixture(autouse=True)
def no_commands_left_behind():
    saved = dict(registry._commands)
    yield
    registry._commands.clear()
    registry._commands.update(saved)


@pytest.fixture(scope="module")
def relu_catalog(tmp_path_factory):
    specs = tmp_path_factory.mktemp("specs")
    for name in ("_defaults/tolerances.yaml", "com.microsoft/ReluGrad.yaml"):
        (specs / name).parent.mkdir(parents=True, exist_ok=True)
        (specs / name).write_bytes((ROOT / "specs" / name).read_bytes())
    return load_catalog(specs)


def run_command(catalog, tmp_path, template, cases="float32-*", timeout=20.0, tier="smoke"):
    name = registry.define_command(f"cmd={template}")
    outcome = run(catalog, RunOptions(backends=["reference", name], tier=tier, out=tmp_path / "run", progress=False,
                                      timeout=timeout, cases=cases))
    records = read_results(outcome.run_dir)
    return outcome, [r for r in records if r["backend"] == name]


def test_template_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match=r"unknown placeholder \{input\}.*known: \{case\}"):
        parse_template("./k {input}")
    with pytest.raises(ValueError, match="does not split into arguments"):
        parse_template("./k 'unclosed")
    with pytest.raises(ValueError, match="empty command template"):
        parse_template("   ")
    assert parse_template("./k --json '{{\"a\": 1}}' {dataset}") == ["./k", "--json", '{{"a": 1}}', "{dataset}"]
    assert set(PLACEHOLDERS) >= {"case", "model", "dataset", "threads", "dtype"}


@pytest.mark.parametrize("definition, says", [
    ("no-template", "write NAME=TEMPLATE"),
    ("1bad=./k", "use letters, digits"),
    ("ort=./k", "already a backend"),
    ("mine=./k {nope}", "unknown placeholder {nope}"),
])
def test_a_bad_definition_is_refused(definition, says):
    with pytest.raises(registry.UnknownBackend, match=says.replace("{", r"\{").replace("}", r"\}")):
        registry.define_command(definition)


def test_a_defined_command_is_a_backend_but_not_expected():
    name = registry.define_command(f"relu-sh={EXAMPLE}")
    assert name in registry.known() and name in registry.defaults() and name not in registry.EXPECTED
    backend = registry.create(name)
    assert isinstance(backend, CommandBackend) and backend.environment() == {"command": EXAMPLE}


def test_the_example_script_is_judged_like_any_backend(relu_catalog, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    outcome, mine = run_command(relu_catalog, tmp_path, EXAMPLE, tier="ci", cases=None)
    assert outcome.passed, outcome.summary["verdict"]
    float32 = [r for r in mine if r["dtype"] == "float32"]
    assert float32 and {r["status"] for r in float32} == {"pass"}
    invalid = [r for r in float32 if not r["valid"]]
    assert invalid and all("rejected as expected: relu_grad.sh: dY" in r["detail"] for r in invalid)
    float16 = [r for r in mine if r["dtype"] == "float16"]
    assert float16 and all(r["status"] == "unsupported" and r["detail"] == "relu_grad.sh: no float16 kernel"
                           for r in float16)
    assert outcome.summary["command_backends"] == {"cmd": EXAMPLE}


@pytest.mark.parametrize("template, status, failure, says", [
    ("sh -c 'kill -SEGV $$'", "crashed", "crash", "the command was killed by SIGSEGV"),
    # a shell reports its child's signal as exit 128 + N
    ("sh -c 'sh -c \"kill -ABRT \\$\\$\"; exit $?'", "crashed", "crash", "(a child killed by SIGABRT)"),
    ("sh -c 'echo no such file >&2; exit 1'", "crashed", "crash", "the command exited 1: no such file"),
    # exit 2 (a shell's or argparse's usage error) is a crash, never a rejection
    ("sh -c 'exit 2'", "crashed", "crash", "the command exited 2"),
    ("true", "crashed", "crash", "malformed output: output_0.pb (dX) was not written"),
    ("sh -c 'echo not a tensor > {dataset}/output_0.pb'", "crashed", "crash", "output_0.pb is not a TensorProto"),
    ("sh -c 'echo my kernel wants contiguous rows >&2; exit 65'", "fail", "rejects_valid",
     "rejected a valid input: my kernel wants contiguous rows"),
    ("sh -c 'sleep 30'", "crashed", "hang", "no answer within its 1 s --timeout"),
    ("/no/such/program {dataset}", "crashed", "crash", "the command did not start"),
])
def test_a_misbehaving_command_is_a_result_and_the_run_goes_on(relu_catalog, tmp_path, template, status, failure, says):
    if template.startswith("/no/such"):  # unavailable: naming it fails the run before any case
        with pytest.raises(RunError, match="/no/such/program does not exist"):
            run_command(relu_catalog, tmp_path, template)
        backend = CommandBackend(label="x", template="{dataset}/prog")  # chosen per case: a crash per case
        template = backend.template
    outcome, mine = run_command(relu_catalog, tmp_path, template, cases="float32-basic/*", timeout=1.0)
    valid = [r for r in mine if r["valid"]]
    assert len(valid) == 3  # every case ran, the ones after a crash or a hang too
    for r in valid:
        assert (r["status"], r["failure"]) == (status, failure), r["detail"]
        assert says in r["detail"], r["detail"]
    assert not outcome.passed


def test_unsupported_exit_is_counted_apart(relu_catalog, tmp_path):
    outcome, mine = run_command(relu_catalog, tmp_path, "sh -c 'echo no {dtype} kernel >&2; exit 69'", cases="float32-basic/*")
    assert mine and all(r["status"] == "unsupported" and r["detail"] == "no float32 kernel" for r in mine)


def test_the_command_sees_the_case_directory_and_its_environment(relu_catalog, tmp_path):
    seen = tmp_path / "seen.jsonl"
    script = tmp_path / "spy.py"
    script.write_text(
        "import json, os, sys\nfrom pathlib import Path\n"
        "case, model, dataset, threads, op, domain, dtype = sys.argv[1:]\n"
        f"with open({str(seen)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'args': sys.argv[1:], 'files': sorted(p.name for p in Path(dataset).iterdir()),\n"
        "        'model_in_case': Path(model).parent == Path(case), 'env': {k: os.environ.get(k) for k in\n"
        "        ('OPCONFORM_OP', 'OPCONFORM_DTYPE', 'OPCONFORM_THREADS', 'OMP_NUM_THREADS')}}) + '\\n')\n"
        "sys.exit(69)\n")
    run_command(relu_catalog, tmp_path, f"{sys.executable} {script} {{case}} {{model}} {{dataset}} {{threads}} {{op}} "
                "{domain} {dtype}", cases="float32-basic/shape=7")
    calls = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(calls) == 1
    call = calls[0]
    assert call["args"][3:] == ["1", "ReluGrad", "com.microsoft", "float32"]
    assert call["files"] == ["input_0.pb", "input_1.pb"] and call["model_in_case"]
    assert call["env"] == {"OPCONFORM_OP": "ReluGrad", "OPCONFORM_DTYPE": "float32", "OPCONFORM_THREADS": "1",
                           "OMP_NUM_THREADS": "1"}


def test_cli_defines_and_runs_the_example(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--command-backend", f"relu-sh={EXAMPLE}",
                           "--backends", "reference,relu-sh", "--ops", "ReluGrad", "--tier", "smoke", "--cases",
                           "float32-*", "--out", str(tmp_path / "run"), "--no-progress"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "relu-sh" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--command-backend", "relu-sh=./k {input}",
                          "--out", str(tmp_path / "bad")], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown placeholder {input}" in bad.stderr


def generated_suite(*args):
    return subprocess.run([sys.executable, "-m", "pytest", "generated_tests/test_ReluGrad.py", "-p", "no:cacheprovider",
                           "-q", "-n", "0", "-m", "smoke and relu_sh", "-rs", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_generated_suite_runs_a_command_backend_defined_at_test_time():
    good = generated_suite("--opconform-command-backend", f"relu-sh={ROOT}/{EXAMPLE}")
    assert good.returncode == 0, good.stdout[-2000:]
    assert "unsupported: relu_grad.sh: no float16 kernel" in good.stdout and "verdict: PASS" in good.stdout
    crashing = generated_suite("--opconform-command-backend", "relu-sh=sh -c 'kill -SEGV $$'")
    assert crashing.returncode == 1 and "the command was killed by SIGSEGV" in crashing.stdout, crashing.stdout[-2000:]
