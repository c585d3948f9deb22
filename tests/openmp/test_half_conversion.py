"""The C library's float16 conversions (csrc/call.h) give F16C's bits for every input, at every ISA level.

The baseline and avx512 builds convert with integer and float operations GCC can vectorise, the avx2 build
with F16C itself. Each level's form, compiled with the flags CMakeLists.txt builds that level with, is
compared with F16C's vector instructions over all 2^16 float16 and all 2^32 float32 bit patterns: exact
widening, round-to-nearest-even narrowing (ties, subnormals, overflow), NaN quieted with its payload.
"""
from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_vectorised import cmake_flags

CSRC = Path(__file__).parents[2] / "csrc"

# F16C's conversions, in a unit of their own: the level under test never sees -mf16c
REFERENCE = r"""
#include <immintrin.h>
#include <stdint.h>
void ref_widen(const uint16_t *h, float *f, long n) {
    for (long i = 0; i < n; i += 8) _mm256_storeu_ps(f + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
}
void ref_narrow(const float *f, uint16_t *h, long n) {
    for (long i = 0; i < n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
}
"""

CHECK = r"""
#include <stdio.h>
#include "call.h"
void ref_widen(const uint16_t *h, float *f, long n);
void ref_narrow(const float *f, uint16_t *h, long n);
#define CHUNK 65536
static float in[CHUNK], want_f[CHUNK], got_f[CHUNK];
static uint16_t half[CHUNK], want_h[CHUNK], got_h[CHUNK];
int main(void) {
    long bad = 0;
    for (long i = 0; i < CHUNK; i++) half[i] = (uint16_t)i;
    ref_widen(half, want_f, CHUNK);
    for (long i = 0; i < CHUNK; i++) got_f[i] = opc_f16_to_f32(half[i]);
    for (long i = 0; i < CHUNK; i++)
        if (memcmp(&got_f[i], &want_f[i], 4) && bad++ < 5) {
            uint32_t g, w;
            memcpy(&g, &got_f[i], 4), memcpy(&w, &want_f[i], 4);
            printf("widen %04lx: %08x, F16C %08x\n", i, g, w);
        }
    for (uint64_t base = 0; base < (1ull << 32); base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            uint32_t u = (uint32_t)(base + i);
            memcpy(&in[i], &u, 4);
        }
        for (long i = 0; i < CHUNK; i++) got_h[i] = opc_f32_to_f16(in[i]);
        ref_narrow(in, want_h, CHUNK);
        for (long i = 0; i < CHUNK; i++)
            if (got_h[i] != want_h[i] && bad++ < 10)
                printf("narrow %08lx: %04x, F16C %04x\n", (unsigned long)(base + i), got_h[i], want_h[i]);
    }
    printf("%ld mismatches\n", bad);
    return bad != 0;
}
"""


def _has_f16c() -> bool:
    try:
        return " f16c" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


pytestmark = [
    pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the ISA levels are x86-64 levels"),
    pytest.mark.skipif(not _has_f16c(), reason="the check compares with F16C, which this CPU lacks"),
]


@pytest.mark.parametrize("level", ["baseline", "avx2", "avx512"])
def test_float16_conversions_match_f16c_for_every_input(level, tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc not on PATH (the kernels are built with it)")
    common, levels = cmake_flags()
    (tmp_path / "reference.c").write_text(REFERENCE)
    (tmp_path / "check.c").write_text(CHECK)
    steps = [[gcc, "-O2", "-mavx", "-mf16c", "-c", "reference.c", "-o", "reference.o"],
             [gcc, "-std=gnu11", *common, *levels[level], f"-I{CSRC}", "-c", "check.c", "-o", "check.o"],
             [gcc, "check.o", "reference.o", "-o", "check"]]
    for cmd in steps:
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}"
    run = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{level}: {run.stdout[-2000:]}"
