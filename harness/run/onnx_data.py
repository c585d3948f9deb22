"""ONNX backend-test directories: model.onnx (one node) + test_data_set_N/input_K.pb, output_K.pb.

`run-onnx` runs such directories on any backend and compares with the stored outputs under the
spec's tolerances; `export-onnx` writes opconform's own cases in the same layout, so test data moves
both ways between opconform and other runtimes' suites.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from harness import backends as registry
from harness.backends.backend_test_dir import from_tensor_proto, numpy_dtype, read_value, write_case, write_outputs, write_tensor
from harness.backends.base import Crashed, Outputs, Rejected, Request, TimedOut, Unsupported
from harness.core import dtypes, sequences
from harness.core.compare import compare
from harness.core.sequences import Value
from harness.core.spec_checks import unknown_name
from harness.core.spec_loader import Catalog
from harness.core.status import Status
from harness.core.tolerance import allowances
from harness.run.engine import prepare, request_for
from harness.run.probe import capability
from harness.run.runner import RunError
from harness.spec.model import Spec, declared_shape_key


class DataError(ValueError):
    """A directory that is not in the backend-test layout opconform can run."""


def _read_tensor(path: Path, value_info=None) -> np.ndarray | list[np.ndarray]:
    """The file's tensor; a list of tensors where the model declares the value a sequence."""
    sequence = value_info is not None and value_info.type.HasField("sequence_type")
    try:
        return read_value(path, sequence)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, or a tensor whose data does not fit its dims
        kind = "SequenceProto" if sequence else "TensorProto"
        raise DataError(f"{path.name} is not a readable {kind} ({type(e).__name__}: {e})") from None


def _graph_types(value_info) -> tuple[int, list[int | None] | None]:
    """(elem_type, dims) of a graph input or output; a dim is an int or None where symbolic or absent."""
    tensor = value_info.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    return tensor.elem_type, (dims if tensor.HasField("shape") else None)


def _check_against_model(kind: str, k: int, value_info, array: Value) -> None:
    """A stored tensor must have the dtype and the static shape the model declares for it (a sequence: its element
    type, each element)."""
    if value_info.type.HasField("sequence_type"):
        element = value_info.type.sequence_type.elem_type.tensor_type.elem_type
        if not sequences.is_seq(array):
            raise DataError(f"{kind}_{k}.pb holds a tensor but the model declares {value_info.name} a sequence")
        if element and any(t.dtype != numpy_dtype(element) for t in array):
            raise DataError(f"{kind}_{k}.pb holds tensors that are not {numpy_dtype(element)} in sequence {value_info.name}")
        return
    elem_type, dims = _graph_types(value_info)
    if elem_type:
        declared = numpy_dtype(elem_type)
        if array.dtype != declared:
            raise DataError(f"{kind}_{k}.pb holds {array.dtype} but the model declares {value_info.name} as {declared}")
    if dims is not None and (len(dims) != array.ndim or any(d is not None and d != n for d, n in zip(dims, array.shape))):
        shown = [d if d is not None else "?" for d in dims]
        raise DataError(f"{kind}_{k}.pb has shape {list(array.shape)} but the model declares {value_info.name} as {shown}")


def _stored_files(dataset: Path, kind: str) -> dict[int, Path]:
    found = {}
    for path in dataset.glob(f"{kind}_*.pb"):
        index = path.stem.split("_", 1)[1]
        if not index.isdigit():
            raise DataError(f"{path.name}: name it {kind}_K.pb with K the position in the model's {kind}s")
        found[int(index)] = path
    return found


DEFAULT_DOMAIN = "ai.onnx"


def canonical_domain(domain: str) -> str:
    """ONNX writes its default domain as '' (every MaxPoolGrad a training graph holds); specs say ai.onnx."""
    return domain or DEFAULT_DOMAIN


def spec_for_node(catalog: Catalog, node) -> Spec:
    """The spec of the node's (domain, op), or a DataError naming the unknown domain or op."""
    domain = canonical_domain(node.domain)
    shown = f"{domain!r}" if node.domain else f"'' ({DEFAULT_DOMAIN})"
    domains = sorted({canonical_domain(s.domain) for s in catalog.specs})
    same_name = [s for s in catalog.specs if s.op == node.op_type]
    hint = f"; {node.op_type} is in {canonical_domain(same_name[0].domain)!r}" if same_name else ""
    if domain not in domains:
        raise DataError(f"unknown domain {shown} (the specs cover {', '.join(map(repr, domains))}){hint}")
    for spec in catalog.specs:
        if spec.op == node.op_type and canonical_domain(spec.domain) == domain:
            return spec
    if same_name:  # the op exists, in another domain: that is the whole story
        raise DataError(f"unknown op '{node.op_type}' in domain {shown}{hint}")
    names = [s.op for s in catalog.specs if canonical_domain(s.domain) == domain]
    message = unknown_name("op", node.op_type, names)
    raise DataError(message.replace(f"'{node.op_type}'", f"'{node.op_type}' in domain {shown}", 1))


def load_model(directory: Path) -> tuple[onnx.ModelProto, onnx.NodeProto]:
    path = directory / "model.onnx"
    if not path.is_file():
        raise DataError("no model.onnx")
    try:
        model = onnx.load(str(path))
    except Exception as e:  # noqa: BLE001 - onnx raises its own and protobuf's errors: a data error
        raise DataError(f"model.onnx does not parse ({type(e).__name__}: {e})") from None
    if len(model.graph.node) != 1:
        raise DataError(f"model.onnx has {len(model.graph.node)} nodes; only one-node models are supported")
    return model, model.graph.node[0]


def node_attributes(node: onnx.NodeProto) -> dict:
    def plain(value):
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value
    return {a.name: plain(helper.get_attribute_value(a)) for a in node.attribute}


def request_from_dataset(catalog: Catalog, model, node, dataset: Path, threads: int) -> tuple[Request, dict]:
    """The request one test_data_set describes, and its stored outputs by spec output name."""
    spec = spec_for_node(catalog, node)
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    files = _stored_files(dataset, "input")
    if extra := sorted(k for k in files if k >= len(graph_inputs)):
        raise DataError(f"input_{extra[0]}.pb has no graph input to feed (the model has {len(graph_inputs)})")
    if missing := [k for k in range(len(graph_inputs)) if k not in files]:
        raise DataError(f"input_{missing[0]}.pb is missing (graph input {graph_inputs[missing[0]].name})")
    stored = {}
    for k, graph_input in enumerate(graph_inputs):
        stored[graph_input.name] = _read_tensor(files[k], graph_input)
        _check_against_model("input", k, graph_input, stored[graph_input.name])
    stored.update({t.name: from_tensor_proto(t) for t in model.graph.initializer})
    if len(node.input) > len(spec.inputs) or len(node.output) > len(spec.outputs):
        raise DataError(f"the node has more inputs or outputs than the {spec.op} spec")
    inputs = [stored.get(node.input[i]) if i < len(node.input) and node.input[i] else None
              for i in range(len(spec.inputs))]
    wanted = tuple(i < len(node.output) and bool(node.output[i]) for i in range(len(spec.outputs)))
    present = [v for v in inputs if v is not None]
    if not present:
        raise DataError(f"{dataset.name}: no input_K.pb matches the node's inputs")
    expected = {}
    outputs = _stored_files(dataset, "output")
    if extra := sorted(k for k in outputs if k >= len(model.graph.output)):
        raise DataError(f"output_{extra[0]}.pb has no graph output (the model has {len(model.graph.output)})")
    for k, output in enumerate(model.graph.output):
        if k in outputs and output.name in node.output:
            value = _read_tensor(outputs[k], output)
            _check_against_model("output", k, output, value)
            expected[spec.outputs[list(node.output).index(output.name)].name] = value
    # the case dtype is the main type variable's (dY's: GatherGrad's first input is its int64 shape)
    main = [v for inp, v in zip(spec.inputs, inputs) if v is not None and inp.type == spec.main_type]
    dtype = dtypes.name_of(sequences.dtype_of((main or present)[0]) or np.float32)  # (an empty list: float32)
    return Request(spec, dtype, inputs, {**_op_attributes(spec, node), **_declared_shapes(spec, model, node)},
                   wanted, threads), expected


def _op_attributes(spec, node) -> dict:
    """The node's attributes, less the forward op's own that a gradient builder copies onto the node although
    the op reads none of them (MaxPoolGrad carries MaxPool's kernel_shape, strides, pads, ceil_mode)."""
    forward_only = set(spec.forward.own_attributes) - set(spec.attributes) if spec.forward else set()
    return {k: v for k, v in node_attributes(node).items() if k not in forward_only}


def _declared_shapes(spec, model, node) -> dict:
    """The static shapes the model declares for outputs the op cannot size from its inputs (Spec.declared_shapes)."""
    declared = spec.declared_shapes()
    shapes = {}
    for index, out in enumerate(spec.outputs):
        key = declared_shape_key(out.name)
        if key not in declared or index >= len(node.output):
            continue
        for graph_output in model.graph.output:
            dims = graph_output.type.tensor_type.shape.dim
            if graph_output.name == node.output[index] and dims and all(d.HasField("dim_value") for d in dims):
                shapes[key] = [d.dim_value for d in dims]
    return shapes


def run_dirs(catalog: Catalog, dirs: list[Path], backend_name: str, write_outputs: Path | None,
             threads: int = 1, timeout: float = 20.0, out=None) -> bool:
    """Run every test_data_set of every directory on the backend, a line each, then the counts. True when
    nothing failed: cases the backend does not run (its probe or its own answer) are counted apart."""
    out = out or sys.stdout
    backend = registry.create(backend_name, threads=threads, timeout=timeout)
    if reason := backend.availability():
        raise RunError(f"backend '{backend_name}' is unavailable here: {reason}")
    counts = dict.fromkeys((Status.PASS.value, Status.FAIL.value, Status.UNSUPPORTED.value), 0)
    outcomes: dict[str, int] = {}  # failures that were not value mismatches, by kind
    try:
        for directory in dirs:
            try:
                model, node = load_model(directory)
                datasets = sorted(directory.glob("test_data_set_*"))
                if not datasets:
                    raise DataError("no test_data_set_N folders")
            except DataError as e:
                print(f"ERROR {directory}: {_one_line(e)}", file=out)
                counts["fail"] += 1
                outcomes["error"] = outcomes.get("error", 0) + 1
                continue
            for dataset in datasets:
                try:
                    verdict, line = _run_dataset(catalog, backend, model, node, dataset, threads, write_outputs)
                except Exception as e:  # noqa: BLE001 - comparing or writing failed: this case's error only
                    verdict, line = "fail", f"ERROR {directory.name}/{dataset.name}: {type(e).__name__}: {_one_line(e)}"
                print(line, file=out)
                counts[verdict] += 1
                kind = line.split()[0].lower()
                if verdict == "fail" and kind != "fail":  # say how many of the failures were not value mismatches
                    outcomes[kind] = outcomes.get(kind, 0) + 1
    finally:
        backend.close()
    breakdown = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
    print(f"{counts['pass']} passed, {counts['fail']} failed" + (f" ({breakdown})" if breakdown else "")
          + f", {counts['unsupported']} unsupported", file=out)
    return counts["fail"] == 0


def _run_dataset(catalog, backend, model, node, dataset: Path, threads, write_outputs) -> tuple[str, str]:
    """(pass, fail or unsupported; the case's line)."""
    label = f"{dataset.parent.name}/{dataset.name}"
    try:
        request, expected = request_from_dataset(catalog, model, node, dataset, threads)
        # as `opconform run` does: what the backend's probe says it does not run is never run, so never passed
        support = capability(backend, request.spec, request.dtype)
        if support.gates:
            return "unsupported", f"UNSUPPORTED {label}: {request.dtype}: {support.status}: {_one_line(support.reason)}"
        outcome = backend.run(request)
    except DataError as e:
        return "fail", f"ERROR {label}: {_one_line(e)}"
    except Exception as e:  # noqa: BLE001 - one directory's bad data is that case's error, never the run's end
        return "fail", f"ERROR {label}: {type(e).__name__}: {_one_line(e)}"
    if isinstance(outcome, Rejected):
        return "fail", f"FAIL {label}: {backend.name} rejected the inputs: {outcome.message}"
    if isinstance(outcome, Unsupported):
        return "unsupported", f"UNSUPPORTED {label}: {outcome.reason}"
    if isinstance(outcome, Crashed):
        return "fail", f"CRASH {label}: {outcome.cause or f'worker killed by {outcome.signal}'}"
    if isinstance(outcome, TimedOut):
        return "fail", f"HANG {label}: no answer within {outcome.seconds:g} s"
    assert isinstance(outcome, Outputs)
    if write_outputs:
        _write_dataset(write_outputs / dataset.parent.name, model, node, dataset, request, outcome)
    if not expected:
        return "pass", f"RAN {label}: no stored outputs to compare" + (" (outputs written)" if write_outputs else "")
    spec = request.spec
    tolerance = catalog.tolerance(spec, request.dtype)
    stored = [sequences.float64(expected[o.name]) if o.name in expected else None for o in spec.outputs]
    extra, allowance_notes, missing = _allowances(request, stored)
    notes, ok = [], True
    for index, (out_spec, actual) in enumerate(zip(spec.outputs, outcome.values)):
        want = stored[index]
        if want is None or actual is None:
            continue
        if form := sequences.form_problem(spec.is_sequence(out_spec), actual, want):
            ok = False
            notes.append(f"{out_spec.name}: {form}")
            continue
        result = compare(sequences.flat(actual), sequences.flat(want), spec.dtype_of(out_spec, request.dtype),
                         tolerance.noted(allowance_notes[index]), extra[index],
                         sequences.shape_of(want) if spec.is_sequence(out_spec) else None)
        ok &= result.passed
        notes.append(f"{out_spec.name} max abs {result.max_abs:.3g}, tolerance used x{result.budget_used:.3g}"
                     + ("" if result.passed else f": {'; '.join(result.problems)}"))
    if missing:
        notes.append(missing)
    return ("pass" if ok else "fail"), f"{'PASS' if ok else 'FAIL'} {label}: " + " | ".join(notes)


def _allowances(request: Request, stored: list) -> tuple[list, list[str], str | None]:
    """The spec's reduction allowances for these inputs and attributes, as `opconform run` computes them
    (harness.core.tolerance.allowances); where the directory lacks what they need (an input, an attribute),
    none, and a note for the case's line saying the outputs were judged without them."""
    spec = request.spec
    try:
        extra, notes = allowances(spec, {i.name: v for i, v in zip(spec.inputs, request.inputs)},
                                  request.attributes, request.dtype, stored)
        return extra, notes, None
    except Exception as e:  # noqa: BLE001 - the spec's accuracy hooks on data opconform did not generate
        return ([None] * len(spec.outputs), [""] * len(spec.outputs),
                f"judged without the reduction allowance, which needs what this directory lacks "
                f"({type(e).__name__}: {_one_line(e, 200)})")


def _one_line(error: Exception | str, limit: int = 400) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _write_dataset(target: Path, model, node, dataset: Path, request: Request, outcome: Outputs) -> None:
    (target / dataset.name).mkdir(parents=True, exist_ok=True)
    if not (target / "model.onnx").exists():
        onnx.save(model, str(target / "model.onnx"))
    for source in dataset.glob("input_*.pb"):
        shutil.copyfile(source, target / dataset.name / source.name)
    graph_outputs = [o.name for o in model.graph.output]
    for out_spec, value in zip(request.spec.outputs, outcome.values):
        if value is None:
            continue
        name = node.output[request.spec.outputs.index(out_spec)]
        if name in graph_outputs:
            write_tensor(target / dataset.name / f"output_{graph_outputs.index(name)}.pb", value, name)


def export_case(prepared, directory: Path) -> None:
    """Write one prepared valid case as a backend-test directory with the reference outputs."""
    request = request_for(prepared)
    model = write_case(request, directory)
    write_outputs(request, model, directory, dict(zip([o.name for o in request.spec.outputs], prepared.expected)))


def cases_backend_runs(backend_name: str, cases, threads: int = 1, timeout: float = 20.0) -> tuple[list, list[str]]:
    """(the cases the backend runs, one line per (op, dtype) it does not): decided as `opconform run` decides
    `unsupported` without running a case, by the backend's capability probe (harness.run.probe)."""
    backend = registry.create(backend_name, threads=threads, timeout=timeout)
    try:
        if reason := backend.availability():
            raise RunError(f"backend '{backend_name}' is unavailable here: {reason}")
        kept = []
        left_out: dict[tuple[str, str], list] = {}  # (op, dtype) -> [the probe's answer, cases left out]
        for case in cases:
            support = capability(backend, case.spec, case.dtype)
            if support.gates:
                left_out.setdefault((case.spec.op, case.dtype), [support, 0])[1] += 1
            else:
                kept.append(case)
    finally:
        backend.close()
    return kept, [f"{op} {dtype}: {n} case(s) left out: {backend_name} {support.status}: {_one_line(support.reason, 200)}"
                  for (op, dtype), (support, n) in left_out.items()]


def export_cases(catalog: Catalog, cases, out: Path, seed: int = 0) -> int:
    written = 0
    for case in cases:
        if not case.valid:
            continue
        prepared = prepare(case, seed)
        if prepared.problem:
            continue
        name = f"{case.spec.op}__{case.full_id}".replace("/", "__").replace(";", "__").replace("=", "-")
        export_case(prepared, out / name)
        written += 1
    return written
