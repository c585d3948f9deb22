"""The float32 hot loops are SIMD code at every ISA level, not libm calls one element at a time.

Each source line marked `/* simd: N */` in csrc/ (a LOOP or KERNELS instantiation, or a loop) must
have N loops that GCC reports vectorised at the level's full vector width, when the file is compiled
with the flags CMakeLists.txt builds the library with. A flag dropped from OPC_FLAGS (e.g.
-fno-trapping-math, without which the select-style loops stay scalar at avx2) or an fmaf call left
in the baseline path (a libm call per element) fails here. Compile only: every level is checked on
any x86-64 machine, whatever its CPU runs.
"""
from __future__ import annotations

import platform
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
CSRC = ROOT / "csrc"
SOURCES = ["eltwise.c", "softmax.c", "dropout.c", "sce_loss_grad.c", "half_blocks.h", "seq_optim.c"]
# a header's marked loops are checked in the report of a file that includes it
COMPILED_AS = {"half_blocks.h": "eltwise.c"}
# Bytes per vector of a level's main loops (GCC's epilogues use half; avx512 builds use zmm).
FULL_WIDTH = {"baseline": 16, "avx2": 32, "avx512": 64}
MARK = re.compile(r"/\* simd: (\d+)")

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the ISA levels are x86-64 levels")


def cmake_flags() -> tuple[list[str], dict[str, list[str]]]:
    """OPC_FLAGS and the per-level -march flags, read from CMakeLists.txt so the check follows the build."""
    text = re.sub(r"#[^\n]*", "", (ROOT / "CMakeLists.txt").read_text())
    common = re.search(r"set\(OPC_FLAGS\s+([^)]*)\)", text)
    assert common, "CMakeLists.txt: set(OPC_FLAGS ...) not found"
    levels: dict[str, list[str]] = {}
    for m in re.finditer(r"set\(OPC_ISA_FLAGS_(\w+)\s+([^)]*)\)", text):  # first: the x86-64 branch
        levels.setdefault(m.group(1), [f for f in shlex.split(m.group(2)) if f])
    assert set(FULL_WIDTH) <= set(levels), f"CMakeLists.txt: ISA flags for {sorted(levels)} only"
    return shlex.split(common.group(1)), levels


def missing_simd(path: Path, level: str) -> list[str]:
    """Marked lines of the C file at `path` with fewer full-width vectorised loops than marked."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not on PATH (the kernels are built with it)")
    common, levels = cmake_flags()
    width = FULL_WIDTH[level]
    compiled = path.with_name(COMPILED_AS.get(path.name, path.name))
    cmd = [gcc, "-std=gnu11", *common, *levels[level], "-fopenmp", f"-I{CSRC}", "-c", str(compiled),
           "-o", "/dev/null", "-fopt-info-vec-optimized"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"compiling {path.name} at {level} failed:\n{proc.stderr[-2000:]}"
    counts: dict[int, int] = {}
    report = re.compile(rf"{re.escape(path.name)}:(\d+):\d+: optimized: loop vectorized using (\d+) byte")
    for m in report.finditer(proc.stderr):
        if int(m.group(2)) >= width:
            counts[int(m.group(1))] = counts.get(int(m.group(1)), 0) + 1
    lines = path.read_text().splitlines()
    marks = {n: int(m.group(1)) for n, text in enumerate(lines, 1) if (m := MARK.search(text))}
    assert marks, f"{path.name}: no /* simd: N */ marks"
    return [f"{path.name}:{n}: {want} loop(s) wanted, {counts.get(n, 0)} vectorised at {width} bytes "
            f"({lines[n - 1].split('/*')[0].strip()})"
            for n, want in sorted(marks.items()) if counts.get(n, 0) < want]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("level", sorted(FULL_WIDTH))
def test_hot_loops_vectorised(level, source):
    missing = missing_simd(CSRC / source, level)
    assert not missing, f"not SIMD at {level}:\n" + "\n".join(missing)


def test_check_catches_a_scalar_loop(tmp_path):
    """The check itself: GeluGrad through libm's erff (one call per element) is reported."""
    text = (CSRC / "eltwise.c").read_text()
    line = "LOOP(gelu_f32, float, gelu_f(g, v))"
    assert line in text
    mutant = tmp_path / "eltwise.c"
    mutant.write_text(text.replace(line, "LOOP(gelu_f32, float, g * erff(v))"))
    missing = missing_simd(mutant, "baseline")
    assert len(missing) == 1 and "LOOP(gelu_f32," in missing[0], missing
