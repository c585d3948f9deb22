"""Run a training graph once, every node output fetched, in a child process (ORT may crash on a graph; a crash is
the census's error, never the end of opconform).

`python -m harness.model.graph_run MODEL DIMS_JSON OUT_NPZ`: the graph's inputs get values of the stated sample
batch (floats: normal * 0.1; integers: 0, a valid token, label and index anywhere; bools: true), ORT runs it with
its optimisations off (the graph as written), and OUT_NPZ holds each tensor's shape and dtype (and small integer
tensors' values).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from harness.model.census import CensusError, gradient_side

SMALL = 64
DIMS_EXIT = 3  # the child's exit status for a symbolic dimension no --dim sizes


class DimsError(CensusError):
    """A symbolic dimension of the graph's inputs that no --dim gives a size (one line)."""


def feeds_for(session, dims: dict[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds, missing = {}, []
    for inp in session.get_inputs():
        shape = []
        for d in inp.shape:
            if isinstance(d, int):
                shape.append(d)
            elif isinstance(d, str) and d in dims:
                shape.append(dims[d])
            else:
                missing.append(f"{inp.name}: {d or 'an unnamed dimension'}")
                shape.append(1)
        kind = inp.type
        if "float" in kind:
            dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16}.get(kind, np.float32)
            feeds[inp.name] = (rng.standard_normal(shape) * 0.1).astype(dtype)
        elif "bool" in kind:
            feeds[inp.name] = np.ones(shape, bool)
        else:
            feeds[inp.name] = np.zeros(shape, np.int32 if "int32" in kind else np.int64)
    if missing:
        names = sorted({m.split(": ", 1)[1] for m in missing})
        raise DimsError(f"the graph's inputs have symbolic dimensions ({'; '.join(missing[:4])}"
                          f"{'; ...' if len(missing) > 4 else ''}): give each with --dim NAME=SIZE "
                          f"(e.g. --dim {names[0].split()[0]}=8)")
    return feeds


def main(model_path: str, dims_json: str, out_path: str, forward_only: str = "") -> int:
    import onnx
    import onnxruntime as ort
    from onnx import helper

    model = onnx.load(model_path)
    if forward_only:  # the forward part only: the gradients' shapes follow from their tensors' (census.fill_gradients)
        drop = {(n.name, tuple(n.output)) for n in gradient_side(model)}
        kept = [n for n in model.graph.node if (n.name, tuple(n.output)) not in drop]
        del model.graph.node[:]
        model.graph.node.extend(kept)
        made = {o for n in kept for o in n.output} | {i.name for i in model.graph.input} | \
            {t.name for t in model.graph.initializer}
        outputs = [o for o in model.graph.output if o.name in made]
        del model.graph.output[:]
        model.graph.output.extend(outputs)
    have = {o.name for o in model.graph.output}
    wanted = [o for n in model.graph.node for o in n.output if o and o not in have]
    for name in wanted:
        model.graph.output.append(helper.make_empty_tensor_value_info(name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = feeds_for(session, json.loads(dims_json))
        names = [o.name for o in session.get_outputs()]
        results = session.run(names, feeds)
    except DimsError as e:
        print(str(e), file=sys.stderr)
        return DIMS_EXIT
    except Exception as e:  # noqa: BLE001 - ORT's refusal is the message the user needs, on one line
        print(f"onnxruntime could not run the training graph: {str(e).splitlines()[0][:400]}", file=sys.stderr)
        return 4
    table = {}
    for name, value in [*feeds.items(), *zip(names, results)]:
        value = np.asarray(value)
        entry = {"dtype": value.dtype.name, "shape": list(value.shape)}
        if value.size <= SMALL and value.dtype.kind in "iub":
            entry["value"] = value.tolist()
        table[name] = entry
    Path(out_path).write_text(json.dumps(table))
    return 0


def run_graph(model_path: Path, dims: dict[str, int], out: Path, timeout: float, log=None) -> tuple[dict, str | None]:
    """(tensor -> {dtype, shape[, value]} for every input and node output, from a child process; ORT's crash on the
    whole training graph or None). After such a crash (a finding of its own) the forward part is run alone and the
    census shapes each gradient as its tensor. A missing --dim is DimsError."""
    done = _child(model_path, dims, out, timeout)
    if done.returncode < 0:
        crash = f"onnxruntime crashed running the whole training graph (signal {-done.returncode})"
        if log:
            log(f"{crash}; reading the shapes from the forward part alone")
        again = _child(model_path, dims, out, timeout, forward_only=True)
        if again.returncode == 0:
            return json.loads(out.read_text()), crash
        done = again
    if done.returncode == DIMS_EXIT:  # the user's missing --dim, not the graph's: a usage error
        raise DimsError(done.stderr.strip().splitlines()[-1])
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        if done.returncode < 0:
            raise CensusError(f"onnxruntime crashed running the training graph (signal {-done.returncode})")
        raise CensusError(lines[-1] if lines else f"running the training graph failed (exit {done.returncode})")
    return json.loads(out.read_text()), None


def _child(model_path: Path, dims: dict, out: Path, timeout: float, forward_only: bool = False):
    try:
        return subprocess.run([sys.executable, "-m", "harness.model.graph_run", str(model_path), json.dumps(dims), str(out),
                               "forward" if forward_only else ""], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CensusError(f"running the training graph took more than {timeout:g} s (--timeout)") from None


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
