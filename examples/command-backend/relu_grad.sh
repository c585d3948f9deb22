#!/usr/bin/env bash
# An opconform command backend: ReluGrad for float32 and float64, one case per call.
#
#   opconform run --command-backend relu-sh='examples/command-backend/relu_grad.sh {dataset} {dtype}' \
#                 --backends reference,relu-sh --ops ReluGrad --tier ci
#
# $1 is the case's test_data_set_0 directory: input_0.pb (dY) and input_1.pb (X), ONNX TensorProtos in the
# op's input order; write output_0.pb (dX) there. Exit 65 to reject invalid inputs, 69 for a dtype or op
# without a kernel, 0 after writing the outputs; anything else (or a signal) is a crash.
# A real kernel team would call its own binary here; this example does the math with NumPy.
set -euo pipefail
dataset="$1" dtype="$2"

case "$dtype" in
    float32|float64) ;;
    *) echo "relu_grad.sh: no $dtype kernel" >&2; exit 69 ;;
esac

exec "${OPCONFORM_PYTHON:-python3}" - "$dataset" <<'PY'
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, numpy_helper

dataset = Path(sys.argv[1])


def read(name):
    tensor = TensorProto()
    tensor.ParseFromString((dataset / name).read_bytes())
    return numpy_helper.to_array(tensor)


dy, x = read("input_0.pb"), read("input_1.pb")
if dy.shape != x.shape:
    print(f"relu_grad.sh: dY {list(dy.shape)} and X {list(x.shape)} differ in shape", file=sys.stderr)
    sys.exit(65)
dx = np.where(x > 0, dy, np.zeros_like(dy))
(dataset / "output_0.pb").write_bytes(numpy_helper.from_array(dx, "dX").SerializeToString())
PY
