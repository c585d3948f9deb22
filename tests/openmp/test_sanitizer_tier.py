"""The sanitizer tier: the openmp backend's cases under AddressSanitizer + UndefinedBehaviorSanitizer.

Builds libopconform_kernels_asan_<level>.so with csrc/build_sanitizer.sh for the baseline level and
the best level this CPU runs (about 15 s each) and runs the ci tier of every op on each (a superset of the
smoke cases, invalid inputs included) in a subprocess with libasan
preloaded. A memory error or undefined behaviour aborts the worker: a crashed case fails the verdict.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends import openmp_lib

REPO = Path(__file__).resolve().parents[2]


# baseline and the best level this CPU runs (the same one on an SSE2-only CPU)
LEVELS = sorted({"baseline", openmp_lib.cpu_isa_levels()[-1]}, key=openmp_lib.ISA_LEVELS.index)


@pytest.fixture(scope="module")
def asan_libs(tmp_path_factory) -> dict[str, Path]:
    if not shutil.which("cmake"):
        pytest.fail("cmake is needed for the sanitizer build (apt-get install cmake)")
    build = tmp_path_factory.mktemp("asan")
    result = subprocess.run(["bash", str(REPO / "csrc" / "build_sanitizer.sh"), sys.executable],
                            env={**os.environ, "OPCONFORM_SANITIZE_BUILD_DIR": str(build),
                                 "OPCONFORM_SANITIZE_LEVELS": ";".join(LEVELS)},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    libs = {Path(p).stem.rpartition("_")[2]: Path(p) for p in result.stdout.split()}
    assert sorted(libs) == sorted(LEVELS), result.stdout
    return libs


@pytest.mark.parametrize("level", LEVELS)
def test_ci_cases_run_clean_under_asan_and_ubsan(asan_libs, level, tmp_path):
    asan_lib = asan_libs[level]
    libasan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    env = {**os.environ, "LD_PRELOAD": libasan, "OPCONFORM_KERNELS_LIB": str(asan_lib),
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--backends", "openmp", "--tier", "ci",
                             "--threads", "2", "--out", str(out), "--no-progress", "--no-report"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    summary = json.loads((out / "summary.json").read_text())
    build = summary["backends"]["openmp"]
    assert build["sanitizers"] == "address,undefined" and build["path"] == str(asan_lib)  # not the plain build
    assert build["isa"] == level
    assert "AddressSanitizer" not in result.stderr and "runtime error:" not in result.stderr, result.stderr[-3000:]
    totals = summary["totals"]
    assert result.returncode == 0 and summary["verdict"]["passed"], (totals, result.stdout[-3000:])
    assert totals.get("crashed", 0) == 0 and totals["pass"] > 1000
