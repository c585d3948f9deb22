"""Thread invariance: every op of the C library returns bitwise identical outputs at 1, 2, 3 and 4
threads, at every ISA level the CPU runs and under each OpenBLAS core type it supports.

The cases are each spec's case groups tagged thread_split (their descriptions say which work split of csrc/
each shape crosses: sizes just above block boundaries, odd sizes, N = 1, C = 1, B = 1, and sizes large enough
that every op actually runs threaded), with inputs made by the case machinery a run uses. An op whose spec
names own_saved_state (GRUGrad, LSTMGrad) is fed the saved state of the library's own forward-with-state op.
Nothing here is per op: a new op's thread cases are its spec's thread_split groups. An output a spec declares
intermittent on the openmp backend for a case (a known divergence with `intermittent`) is not compared there;
a declaration for any other backend (ort) exempts nothing here."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from harness.backends import openmp_lib
from harness.core import sequences
from harness.core.bench_spec import missing_thread_split, thread_split_groups
from harness.core.cases import expand
from harness.core.spec_loader import load_catalog
from harness.core.tensors import make_inputs
from harness.run.engine import unrepeatable_outputs
from harness.spec.model import Spec

THREADS = (1, 2, 3, 4)
BACKEND = "openmp"  # whose declared intermittent outputs are not compared
ROOT = Path(__file__).resolve().parents[2]


@cache
def _catalog():
    return load_catalog()


def _spec(op: str) -> Spec:
    return _catalog().by_op(op)


def _op_files() -> dict[str, str]:
    """op -> its C file, from the library's op table (csrc/ops.def: `OPC_OP(<op>, "<file>")`)."""
    rows = [line[len("OPC_OP("):].rstrip(")").split(",") for line in (ROOT / "csrc" / "ops.def").read_text().splitlines()
            if line.startswith("OPC_OP(")]
    return {op.strip(): file.strip().strip('"') for op, file in rows}


def thread_cases(spec: Spec, dtypes) -> list:
    """The spec's thread_split cases in the dtypes given."""
    groups = {g.name for g in thread_split_groups(spec)}
    return [c for c in expand(spec) if c.group.name in groups and c.dtype in dtypes]


def _inputs(case) -> tuple[list, dict]:
    """The case's inputs in ONNX order and its attributes; saved state from the library's own forward op
    (at 1 thread) when the spec names one (own_saved_state)."""
    spec = case.spec
    made = make_inputs(case)
    own = spec.own_saved_state
    if own is not None and all(made.get(name) is not None for name in own.outputs):
        producer = _spec(own.op)
        attrs = {k: v for k, v in case.attributes.items() if k in producer.attributes}
        produced = dict(zip(openmp_lib.op_info(own.op)["outputs"],
                            openmp_lib.run(own.op, [made.get(i.name) for i in producer.inputs], attrs, threads=1)))
        made.update({name: produced[source] for name, source in own.outputs.items()})
    return [made[i.name] for i in spec.inputs], case.attributes


def thread_mismatches(op: str, spec: Spec | None = None) -> list[str]:
    """One line per (dtype, case, thread count, output) whose bytes differ from the 1-thread run;
    the multi-thread runs are made both as they come and with the split forced on small work too
    (openmp_lib.force_split), which must not change a bit either. `spec`: the op's, unless a test gives one."""
    bad = []
    for case in thread_cases(spec or _spec(op), openmp_lib.supported_dtypes(op)):
        ins, attrs = _inputs(case)
        exempt = unrepeatable_outputs(case, BACKEND)
        first = openmp_lib.run(op, ins, attrs, threads=THREADS[0])
        for t, forced in [(t, f) for t in THREADS[1:] for f in (False, True)]:
            with openmp_lib.force_split(forced):
                again = openmp_lib.run(op, ins, attrs, threads=t)
            for name, a, b in zip(openmp_lib.op_info(op)["outputs"], first, again):
                if sequences.is_seq(a):  # a sequence output (the optimizers' lists): its tensors joined, same shapes
                    if sequences.shape_of(a) != sequences.shape_of(b):
                        bad.append(f"{op} {case.full_id}: {name} at {t} threads has other element shapes")
                        continue
                    a, b = sequences.flat(a), sequences.flat(b)
                if name not in exempt and a.tobytes() != b.tobytes():
                    differ = int((a.view(np.uint8).reshape(-1, a.itemsize) != b.view(np.uint8).reshape(
                        -1, b.itemsize)).any(axis=1).sum())
                    bad.append(f"{op} {case.full_id}: {name} at {t} threads{' (split forced)' * forced} "
                               f"differs from 1 thread in {differ} of {a.size} elements")
    return bad


def test_every_op_has_thread_split_groups(lib):
    missing = missing_thread_split(_catalog().specs, lib.ops())
    assert not missing, "\n".join(missing)


def test_an_op_without_thread_split_groups_is_named(lib):
    """The check above fails for a spec that has none: its group tags removed, it names the op."""
    spec = _spec("ReluGrad")
    untagged = spec.model_copy(update={"cases": spec.cases.model_copy(update={
        "groups": [g.model_copy(update={"tags": []}) for g in spec.cases.groups]})})
    assert missing_thread_split([untagged], ["ReluGrad"]) == [
        "ReluGrad: its spec has no case group tagged thread_split (shapes that cross its C kernel's work splits): "
        "add one with `tags: [thread_split]`, tier nightly"]
    assert missing_thread_split([], ["ReluGrad"]) == ["ReluGrad: the C library has it but no spec does"]



@pytest.mark.parametrize("op", list(_op_files()))
def test_bitwise_across_thread_counts(lib, op):
    if op not in lib.ops():
        pytest.fail(f"{op} is in csrc/ops.def but the library has no such op")
    assert thread_cases(_spec(op), openmp_lib.supported_dtypes(op)), f"{op}: no thread_split cases in its dtypes"
    assert thread_mismatches(op) == []


def _one_bit_off_at_more_threads(real):
    """openmp_lib.run with the last element of every output one bit off at more than one thread."""
    def run(op, inputs, attrs, threads=1):
        outs = real(op, inputs, attrs, threads=threads)
        if threads > 1:
            for o in outs:
                if o.size:
                    o.reshape(-1).view(f"u{o.itemsize}")[-1] ^= 1
        return outs
    return run


@pytest.mark.parametrize("backend, compared", [("ort", True), ("openmp", False)])
def test_only_an_openmp_intermittent_declaration_exempts_an_output(lib, monkeypatch, backend, compared):
    """A planted one-bit difference at 2-4 threads is found though ort declares the output intermittent (ort's
    declaration never loosens openmp's check), and not compared where openmp itself declares it."""
    from harness.spec.model import Divergence
    spec = _spec("ReluGrad")
    declared = Divergence(id="planted", backend=backend, cases=["*"], result="wrong_values", intermittent={"reruns": 3},
                          summary="planted by test_omp_threads", evidence="a planted one-bit difference")
    spec = spec.model_copy(update={"known_divergences": [declared]})
    monkeypatch.setattr(openmp_lib, "run", _one_bit_off_at_more_threads(openmp_lib.run))
    bad = thread_mismatches("ReluGrad", spec)
    assert bool(bad) is compared, bad[:3]
    if compared:
        assert "dX at 2 threads differs from 1 thread in 1 of" in bad[0]


# ---- OpenBLAS core types ----------------------------------------------------------------------

# OPENBLAS_CORETYPE names and the CPU flags (/proc/cpuinfo) their kernels need.
CORE_TYPES = {
    "SkylakeX": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx2", "fma"),
    "Haswell": ("avx2", "fma"),
    "Sandybridge": ("avx",),
}

_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from harness.backends import openmp_lib
openmp_lib.use({level!r})
openmp_lib.load()
from tests.openmp.test_omp_threads import blas_ops, thread_mismatches
bad = [line for op in blas_ops() for line in thread_mismatches(op)]
print(json.dumps({{"core": openmp_lib.build_info()["blas_core"], "bad": bad}}))
"""


def blas_ops() -> list[str]:
    """The ops whose work goes through OpenBLAS, rerun under other OpenBLAS core types: those whose C file
    includes csrc/blas.h (ConvGrad, the GRU and LSTM ops today)."""
    return [op for op, file in _op_files().items() if '#include "blas.h"' in (ROOT / "csrc" / file).read_text()]


def test_the_blas_ops_are_found():
    """A rule that finds no op, or every op, would make the core-type test check nothing, or everything."""
    assert 0 < len(blas_ops()) < len(_op_files())


@pytest.mark.parametrize("core", sorted(CORE_TYPES))
def test_bitwise_under_openblas_core_type(lib, core):
    missing = [f for f in CORE_TYPES[core] if f not in openmp_lib.cpu_flags()]
    if missing:
        pytest.skip(f"OpenBLAS core {core} needs CPU features this CPU lacks: {', '.join(missing)}")
    level = openmp_lib.selected_isa()
    env = dict(os.environ, OPENBLAS_CORETYPE=core)
    child = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT), level=level)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, f"child under OPENBLAS_CORETYPE={core} failed:\n{child.stderr[-2000:]}"
    report = json.loads(child.stdout.strip().splitlines()[-1])
    assert report["core"].lower() == core.lower(), (
        f"OPENBLAS_CORETYPE={core} but OpenBLAS picked {report['core']!r}")
    assert report["bad"] == []
