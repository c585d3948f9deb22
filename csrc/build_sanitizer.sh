#!/usr/bin/env bash
# Builds the AddressSanitizer + UndefinedBehaviorSanitizer variant of the kernel library
# (libopconform_kernels_asan_<level>.so, one per ISA level) beside the sources, without reinstalling
# the package, and prints their paths, one a line. The Python given (default: python3 on PATH) must
# have scipy_openblas32 installed. Levels: OPCONFORM_SANITIZE_LEVELS (default: baseline;avx2;avx512).
#
#   lib=$(csrc/build_sanitizer.sh .venv/bin/python | grep _baseline)
#   LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
#     OPCONFORM_KERNELS_LIB=$lib .venv/bin/python -m pytest tests/openmp
#
# libasan must be preloaded because it has to be the first library in a process that was not
# itself built with -fsanitize=address (python); leaks are not checked since CPython keeps its
# allocations until exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${1:-$(command -v python3)}
out=${OPCONFORM_SANITIZE_BUILD_DIR:-$root/build/sanitize}
gen=()
if command -v ninja >/dev/null; then gen=(-G Ninja); fi
cmake -S "$root" -B "$out" "${gen[@]}" -DOPCONFORM_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython_EXECUTABLE="$py" "-DOPCONFORM_ISA_LEVELS=${OPCONFORM_SANITIZE_LEVELS:-baseline;avx2;avx512}" >&2
cmake --build "$out" --parallel 2 >&2
ls "$out"/libopconform_kernels_asan_*.so
