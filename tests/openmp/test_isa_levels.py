"""ISA dispatch of the C kernels: OPCONFORM_ISA forces a level, a level the CPU lacks is an unavailable
backend with the reason (never a SIGILL), and the openmp backend's ci tier passes at every level this
machine can run (the unit tests in this folder run at each of them through the `lib` fixture)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends import openmp_lib

from .conftest import ISA_LEVELS

REPO = Path(__file__).resolve().parents[2]
AVX2_FLAGS = {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "movbe", "abm", "xsave"}
AVX512_FLAGS = AVX2_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="ISA levels are x86-64 levels")
def test_cpu_levels_follow_the_cpu_flags():
    assert openmp_lib.cpu_isa_levels(set()) == ["baseline"]
    assert openmp_lib.cpu_isa_levels(AVX2_FLAGS) == ["baseline", "avx2"]
    assert openmp_lib.cpu_isa_levels(AVX2_FLAGS - {"fma"}) == ["baseline"]  # AVX2 without FMA is not v3
    assert openmp_lib.cpu_isa_levels(AVX512_FLAGS) == ["baseline", "avx2", "avx512"]
    assert openmp_lib.cpu_isa_levels(AVX512_FLAGS - {"avx512vl"}) == ["baseline", "avx2"]


def test_every_level_is_built():
    assert openmp_lib.built_isa_levels() == list(openmp_lib.ISA_LEVELS) or os.environ.get(openmp_lib.ENV_LIB)


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_forced_level_is_the_one_loaded(level):
    r = _python("from harness.backends import openmp_lib as o; import json; b = o.build_info();"
                "print(json.dumps([b['isa'], b['path'], b['flags']]))", OPCONFORM_ISA=level)
    assert r.returncode == 0, r.stderr
    isa, path, flags = json.loads(r.stdout)
    assert isa == level and path.endswith(f"_{level}.so"), (isa, path)
    if level != "baseline":
        assert {"avx2": "x86-64-v3", "avx512": "x86-64-v4"}[level] in flags


def test_unset_means_the_best_level_the_cpu_has():
    r = _python("from harness.backends import openmp_lib as o; print(o.build_info()['isa'])", OPCONFORM_ISA="")
    assert r.returncode == 0 and r.stdout.strip() == ISA_LEVELS[-1], r.stderr


def test_a_level_the_cpu_lacks_raises_before_any_code_runs(monkeypatch):
    monkeypatch.setattr(openmp_lib, "cpu_flags", lambda: set())  # a CPU with SSE2 only
    monkeypatch.setattr(openmp_lib, "_libs", {})
    monkeypatch.setattr(openmp_lib, "_opened", {})  # what earlier tests in this worker opened is not this call's
    with pytest.raises(openmp_lib.IsaUnavailable, match=r"avx2 .*lacks: avx, avx2, fma"):
        openmp_lib.load("avx2")
    assert not any(p.endswith("_avx2.so") for p in openmp_lib._opened)  # not even dlopen'ed


def test_unknown_level_names_the_valid_ones():
    r = _python("from harness.backends import openmp_lib as o; o.load()", OPCONFORM_ISA="sse9")
    assert r.returncode == 1 and "OPCONFORM_ISA='sse9' is not a level; use one of baseline, avx2, avx512" in r.stderr


@pytest.mark.skipif("avx512" in openmp_lib.cpu_isa_levels(), reason="this CPU has AVX-512")
def test_forcing_a_missing_level_makes_the_backend_unavailable_not_a_sigill(tmp_path):
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--backends", "openmp", "--ops", "ReluGrad",
                        "--tier", "smoke", "--out", str(tmp_path / "run"), "--no-progress", "--no-report"],
                       cwd=REPO, env={**os.environ, "OPCONFORM_ISA": "avx512"}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and r.returncode != -4, (r.returncode, r.stderr)  # -4: SIGILL
    assert "openmp" in r.stderr and "avx512" in r.stderr and "lacks" in r.stderr, r.stderr


@pytest.mark.parametrize("level", ISA_LEVELS)
def test_ci_tier_passes_at_every_level(level, tmp_path):
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--backends", "openmp", "--tier", "ci",
                        "--threads", "2", "--out", str(out), "--no-progress", "--no-report"],
                       cwd=REPO, env={**os.environ, "OPCONFORM_ISA": level}, capture_output=True, text=True,
                       timeout=900)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["backends"]["openmp"]["isa"] == level
    assert r.returncode == 0 and summary["verdict"]["passed"], (summary["totals"], r.stdout[-3000:])
    assert summary["totals"].get("crashed", 0) == 0 and summary["totals"]["pass"] > 1000
