"""The C entry points themselves: queries, malformed calls through raw ctypes, build failures."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from .omp_helpers import c_op_table, run_isolated

REPO = Path(__file__).resolve().parents[2]
# The C op table (csrc/ops.def), in registry order; test_descriptors.py holds each op against its spec.
ALL_OPS = [op for op, _ in c_op_table()]


def test_op_list_and_info(lib):
    assert lib.ops() == ALL_OPS
    info = lib.op_info("GRUGrad")
    assert info["inputs"][:3] == ["X", "W", "R"] and len(info["inputs"]) == 10
    assert info["optional_inputs"] == ["B", "sequence_lens", "initial_h", "grad_HAll", "grad_Ht"]
    assert info["outputs"] == ["dX", "dW", "dR", "dB", "dH0"]
    assert "hidden_size" in info["attributes"]
    info = lib.op_info("LSTMGrad")
    assert len(info["inputs"]) == 12 and info["inputs"][6:9] == ["HAll", "CAll", "IOFC"]
    assert info["optional_inputs"] == ["sequence_lens", "initial_h", "initial_c", "grad_HAll", "grad_Ht", "grad_Ct"]
    assert info["outputs"] == ["dX", "dW", "dR", "dB", "dH0", "dC0", "dP"]
    assert "clip" in info["attributes"] and "input_forget" in info["attributes"] and "dB_shape" in info["attributes"]
    assert lib.op_info("LSTMTraining")["outputs"] == ["HAll", "Ht", "Ct", "CAll", "IOFC"]
    assert lib.supported_dtypes("LSTMGrad") == ["float32", "float64"]
    assert lib.op_info("NoSuchOp") is None
    assert lib.supported_dtypes("SoftmaxGrad_13") == ["float32", "float64", "float16", "bfloat16"]
    assert lib.supported_dtypes("ConvGrad") == ["float32", "float64", "float16"]
    assert lib.supported_dtypes("NoSuchOp") == []


def test_build_info(lib):
    info = lib.build_info()
    assert info["compiler"].startswith("gcc") and info["openmp"] >= 201107
    assert "-fopenmp" in info["flags"] and info["blas"] == "scipy-openblas32"
    assert "OpenBLAS" in info["blas_config"] and os.path.exists(info["path"])


def test_infer_shapes(lib):
    x = np.zeros((2, 3, 7, 6), np.float32)
    w = np.zeros((4, 3, 3, 3), np.float32)
    dy = np.zeros((2, 4, 3, 2), np.float32)
    out = lib.infer("ConvGrad", [dy, x, w], {"strides": [2, 2], "pads": [1, 0, 0, 0]})
    assert out == [(np.dtype(np.float32), (2, 3, 7, 6)), (np.dtype(np.float32), (4, 3, 3, 3)),
                   (np.dtype(np.float32), (4,))]
    g = lib.infer("GRUTraining", [np.zeros((5, 2, 3)), np.zeros((1, 12, 3)), np.zeros((1, 12, 4))],
                  {"hidden_size": 4})
    assert [s for _, s in g] == [(5, 1, 2, 4), (1, 2, 4), (5, 1, 2, 12)]
    g = lib.infer("LSTMTraining", [np.zeros((5, 2, 3)), np.zeros((2, 16, 3)), np.zeros((2, 16, 4))],
                  {"hidden_size": 4, "direction": "bidirectional"})
    assert [s for _, s in g] == [(5, 2, 2, 4), (2, 2, 4), (2, 2, 4), (5, 2, 2, 4), (5, 2, 2, 16)]
    z = np.zeros
    g = lib.infer("LSTMGrad", [z((5, 2, 3)), z((1, 16, 3)), z((1, 16, 4)), None, None, None, z((5, 1, 2, 4)),
                               z((5, 1, 2, 4)), z((5, 1, 2, 16))], {"hidden_size": 4})
    assert [s for _, s in g] == [(5, 2, 3), (1, 16, 3), (1, 16, 4), (1, 32), (1, 2, 4), (1, 2, 4), (1, 12)]


def test_unknown_op(lib):
    with pytest.raises(lib.KernelError) as e:
        lib.run("Relu", [np.zeros(2, np.float32)], {})
    assert e.value.status_name == "OPC_ERR_UNKNOWN_OP"


def test_want_outputs_length(lib):
    a = np.zeros(3, np.float32)
    with pytest.raises(lib.KernelError, match="want_outputs has 2 entries"):
        lib.run("ReluGrad", [a, a], {}, want_outputs=[True, True])


def test_unwanted_only_output_computes_nothing(lib):
    a = np.zeros(3, np.float32)
    assert lib.run("ReluGrad", [a, a], {}, want_outputs=[False]) == [None]


def test_prepared_call_keeps_its_outputs_alive(lib):
    """A benchmark may keep only the call: the output arrays it writes into must live as long as it does."""
    import gc
    import weakref

    x = np.linspace(-2, 2, 64, dtype=np.float32)
    dy = np.ones(64, np.float32)
    call, outs = lib.prepare("ReluGrad", [dy, x], {})
    ref = weakref.ref(outs[0])
    del outs
    gc.collect()
    assert ref() is not None, "the prepared call dropped its output array"
    call()
    np.testing.assert_array_equal(ref(), (x > 0).astype(np.float32))


RAW_PRELUDE = """
import ctypes, numpy as np
from harness.backends import openmp_lib as L
lib = L.load()
ERR = ctypes.create_string_buffer(256)

def tensor(a):
    t = L._Tensor()
    a = np.ascontiguousarray(a)
    dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
    KEEP.append((a, dims))
    t.dtype, t.rank, t.shape, t.data = L._DTYPE_CODES[a.dtype], a.ndim, dims, a.ctypes.data
    return t

KEEP = []
def tensors(*ts):
    arr = (L._Tensor * max(1, len(ts)))(*ts)
    KEEP.append(arr)
    return arr

def run(op, ins, n_in, attrs, n_attr, outs, n_out, threads=1, err=ERR, err_len=256):
    s = lib.opc_run(op, n_in, ins, n_attr, attrs, n_out, outs, threads, err, err_len)
    return s, (err.value.decode() if err else "")

a = np.ones((2, 3), np.float32)
good_in = tensors(tensor(a), tensor(a))
out_arr = np.zeros((2, 3), np.float32)
good_out = tensors(tensor(out_arr))
no_attr = (L._Attr * 1)()
"""

RAW_CASES = {
    "null_op": ("print(run(None, good_in, 2, no_attr, 0, good_out, 1))", "unknown op '(null)'", 1),
    "null_inputs": ("print(run(b'ReluGrad', None, 2, no_attr, 0, good_out, 1))", "inputs array is NULL", 2),
    "negative_n_inputs": ("print(run(b'ReluGrad', good_in, -1, no_attr, 0, good_out, 1))", "got -1 inputs", 2),
    "null_outputs": ("print(run(b'ReluGrad', good_in, 2, no_attr, 0, None, 1))", "outputs array is NULL", 2),
    "wrong_n_outputs": ("print(run(b'ReluGrad', good_in, 2, no_attr, 0, good_out, 3))", "exactly 1", 2),
    "null_shape": ("t = tensor(a); t.shape = None\n"
                   "print(run(b'ReluGrad', tensors(t, tensor(a)), 2, no_attr, 0, good_out, 1))", "NULL shape", 2),
    "negative_dim": ("t = tensor(a); t.shape[1] = -3\n"
                     "print(run(b'ReluGrad', tensors(t, tensor(a)), 2, no_attr, 0, good_out, 1))", "negative dimension", 2),
    "rank_too_big": ("t = tensor(a); t.rank = 13\n"
                     "print(run(b'ReluGrad', tensors(t, tensor(a)), 2, no_attr, 0, good_out, 1))", "at most 12", 2),
    "size_overflow": ("t = tensor(a); t.shape[0] = 1 << 40; t.shape[1] = 1 << 40\n"
                      "print(run(b'ReluGrad', tensors(t, t), 2, no_attr, 0, good_out, 1))", "too large", 2),
    "huge_but_valid_count": ("t = tensor(a); t.shape[0] = 1 << 47; t.shape[1] = 1\n"
                             "print(run(b'ReluGrad', tensors(t, tensor(a)), 2, no_attr, 0, good_out, 1))", "differs", 2),
    "bad_dtype_code": ("t = tensor(a); t.dtype = 99\n"
                       "print(run(b'ReluGrad', tensors(t, tensor(a)), 2, no_attr, 0, good_out, 1))", "unknown dtype code 99", 3),
    "null_attr_name": ("at = (L._Attr * 1)(); at[0].kind = 1\n"
                       "print(run(b'QuickGeluGrad', good_in, 2, at, 1, good_out, 1))", "NULL name", 5),
    "bad_attr_kind": ("at = (L._Attr * 1)(); at[0].name = b'alpha'; at[0].kind = 42\n"
                      "print(run(b'QuickGeluGrad', good_in, 2, at, 1, good_out, 1))", "unknown kind 42", 5),
    "null_string": ("at = (L._Attr * 1)(); at[0].name = b'auto_pad'; at[0].kind = 3\n"
                    "print(run(b'ConvGrad', good_in, 2, at, 1, good_out, 3))", "NULL string", 5),
    "null_list": ("at = (L._Attr * 1)(); at[0].name = b'axis'; at[0].kind = 4; at[0].n = 3\n"
                  "print(run(b'SoftmaxGrad', good_in, 2, at, 1, good_out, 1))", "bad list", 5),
    "negative_list_len": ("at = (L._Attr * 1)(); at[0].name = b'pads'; at[0].kind = 4; at[0].n = -2\n"
                          "print(run(b'ConvGrad', good_in, 2, at, 1, good_out, 3))", "bad list", 5),
    "null_in_strings": ("at = (L._Attr * 1)(); at[0].name = b'activations'; at[0].kind = 6; at[0].n = 2\n"
                        "at[0].strings = (ctypes.c_char_p * 2)(b'Sigmoid', None)\n"
                        "print(run(b'GRUTraining', good_in, 2, at, 1, good_out, 3))", "NULL string", 5),
    "null_in_strings_lstm": ("at = (L._Attr * 1)(); at[0].name = b'activations'; at[0].kind = 6; at[0].n = 3\n"
                             "at[0].strings = (ctypes.c_char_p * 3)(b'Sigmoid', b'Tanh', None)\n"
                             "print(run(b'LSTMGrad', good_in, 2, at, 1, tensors(*[tensor(out_arr)] * 7), 7))", "NULL string", 5),
    "lstm_wrong_n_outputs": ("print(run(b'LSTMTraining', good_in, 2, no_attr, 0, good_out, 3))", "exactly 5", 2),
    "duplicate_attr": ("at = (L._Attr * 2)(); at[0].name = at[1].name = b'alpha'; at[0].kind = at[1].kind = 2\n"
                       "print(run(b'QuickGeluGrad', good_in, 2, at, 2, good_out, 1))", "given twice", 4),
    "null_attrs_array": ("print(run(b'QuickGeluGrad', good_in, 2, None, 1, good_out, 1))", "bad attribute array", 2),
    "negative_threads": ("print(run(b'ReluGrad', good_in, 2, no_attr, 0, good_out, 1, threads=-1))", "threads must be", 2),
    "output_wrong_shape": ("o = np.zeros((3, 2), np.float32)\n"
                           "print(run(b'ReluGrad', good_in, 2, no_attr, 0, tensors(tensor(o)), 1))",
                           "output 0 (dX) must be float32 [2, 3], got float32 [3, 2]", 8),
    "output_wrong_dtype": ("o = np.zeros((2, 3), np.float64)\n"
                           "print(run(b'ReluGrad', good_in, 2, no_attr, 0, tensors(tensor(o)), 1))",
                           "must be float32 [2, 3], got float64", 8),
    "output_null_shape": ("t = tensor(out_arr); t.shape = None\n"
                          "print(run(b'ReluGrad', good_in, 2, no_attr, 0, tensors(t), 1))", "got float32 ?", 8),
    "output_bad_rank": ("t = tensor(out_arr); t.rank = 99\n"
                        "print(run(b'ReluGrad', good_in, 2, no_attr, 0, tensors(t), 1))", "got float32 ?", 8),
    "null_err_buffer": ("print(run(b'ReluGrad', good_in, 1, no_attr, 0, good_out, 1, err=None, err_len=0))", "", 2),
    "tiny_err_buffer": ("e = ctypes.create_string_buffer(8)\n"
                        "s, m = run(b'ReluGrad', good_in, 1, no_attr, 0, good_out, 1, err=e, err_len=8)\n"
                        "assert len(m) == 7, m\nprint((s, m))", "ReluGra", 2),
    "infer_null_shapes": ("s = lib.opc_infer(b'ReluGrad', 2, good_in, 0, no_attr, 1, None, ERR, 256)\n"
                          "print((s, ERR.value.decode()))", "out_shapes is NULL", 2),
}


@pytest.mark.parametrize("name", sorted(RAW_CASES))
def test_malformed_raw_calls(name):
    """Each malformed call returns its status and message; run in a subprocess so a crash fails."""
    body, fragment, status = RAW_CASES[name]
    r = run_isolated(RAW_PRELUDE + body)
    assert r.returncode == 0, f"crashed or raised (rc {r.returncode}): {r.stderr[-2000:]}"
    got_status, msg = eval(r.stdout.strip().splitlines()[-1])  # noqa: S307 (our own printed tuple)
    assert got_status == status, (got_status, msg)
    assert fragment in msg, msg


def test_threads_zero_means_default(lib):
    a = np.arange(6, dtype=np.float32) - 2
    (dx,) = lib.run("ReluGrad", [np.ones_like(a), a], {}, threads=0)
    np.testing.assert_array_equal(dx, (a > 0).astype(np.float32))


def test_queries_out_of_range():
    n = len(ALL_OPS)
    r = run_isolated(RAW_PRELUDE + f"print(bool(lib.opc_op_at(-1)), bool(lib.opc_op_at({n})), bool(lib.opc_find_op(None)),"
                                   " lib.opc_status_name(77).decode(), lib.opc_op_count())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False", "False", "OPC_ERR_UNKNOWN_STATUS", str(n)]


# ---- build failures give a clear message -----------------------------------------------------

def _configure(tmp_path, env_extra, source=REPO) -> tuple[int, str]:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not on PATH")
    import sys

    env = dict(os.environ, **env_extra)
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    r = subprocess.run([cmake, "-S", str(source), "-B", str(tmp_path / "b"), *gen, f"-DPython_EXECUTABLE={sys.executable}"],
                       capture_output=True, text=True, env=env, timeout=120)
    return r.returncode, " ".join((r.stdout + r.stderr).split())  # CMake wraps long messages


def test_missing_compiler_message(tmp_path):
    rc, out = _configure(tmp_path, {"CC": str(tmp_path / "no-such-cc")})
    assert rc != 0
    assert "opconform: no C compiler found" in out


def test_an_op_table_line_without_its_definition_fails_the_configure_saying_what_to_do(tmp_path):
    """ops.def names each op's C file; a file that does not define the op stops the build before compiling."""
    source = tmp_path / "src"
    shutil.copytree(REPO / "csrc", source / "csrc")
    shutil.copy(REPO / "CMakeLists.txt", source)
    with open(source / "csrc" / "ops.def", "a") as f:
        f.write('OPC_OP(FusedMatMulGrad, "matmul.c")\n')
    rc, out = _configure(tmp_path, {}, source)
    assert rc != 0
    assert ("csrc/ops.def lists FusedMatMulGrad in csrc/matmul.c, which does not define it. Define its entry there, "
            "next to its kernel: OPC_DEFINE_OP(FusedMatMulGrad)") in out, out


def test_missing_openmp_message(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not on PATH")
    fake = tmp_path / "cc-no-openmp"
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do case "$a" in *openmp*) echo "no openmp" >&2; exit 1;; esac; done\n'
                    f'exec {gcc} "$@"\n')
    fake.chmod(0o755)
    rc, out = _configure(tmp_path, {"CC": str(fake)})
    assert rc != 0
    assert "has no usable OpenMP support" in out
