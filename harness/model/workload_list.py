"""A model's gradient-node configurations as a bench workload list (`opconform bench --model PATH` on an ONNX model,
training graph or artifacts directory; tools/bench_models.py writes the shipped lists with it): the census
`opconform model` takes (harness.model.census) matched to spec cases (harness.model.match), written in the list
format harness.bench.model reads (schema opconform-bench-model/1)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx

from harness.bench.model import NOT_A_KERNEL, SCHEMA, ModelListError
from harness.model import emit
from harness.model.build import build
from harness.model.census import census, declared_shapes
from harness.model.command import _tensors, classify, model_name
from harness.model.graph_run import run_graph
from harness.model.match import match


def node_count(config, ops: dict[str, str]) -> int:
    """How many of the model's nodes a configuration stands for: its gradient kernel's nodes (not the helper nodes
    beside them), or for a training-graph spec the forward layers whose gradient it is."""
    if config.kind == "forward":
        return max(1, len(config.layers))
    own = [n for n in config.nodes if ops.get(n, "").endswith("::" + config.op)]
    return max(1, len(own) or len(config.nodes))


def from_census(found, specs, model: str, what: str = "") -> tuple[dict, list[str]]:
    """(the workload list document, one line per configuration left out and why) of a census."""
    by_op = {s.op: s for s in specs}
    entries, skipped = [], []
    for config in found.configurations:
        spec = by_op[config.spec]
        count = node_count(config, found.ops)
        if spec.subject != "kernel":
            skipped.append(f"{config.spec} ({count} node(s)): {NOT_A_KERNEL}")
            continue
        found_match = match(spec, config.node)
        if found_match.params is None or config.mismatch:
            skipped.append(f"{config.spec} ({count} node(s)): {config.mismatch or found_match.why}")
            continue
        entry: dict[str, Any] = {"op": spec.op, "params": emit._plain(found_match.params), "dtype": found_match.dtype,
                                 "count": count}
        if found_match.inputs:
            entry["inputs"] = emit._plain(found_match.inputs)
        entry["layers"] = list(config.layers[:3])
        entries.append(entry)
    doc = {"schema": SCHEMA, "model": model, "what": what, "dims": found.dims, "opset": found.opset,
           "gradient_nodes": len(found.gradient_nodes), "configurations": entries,
           "left_out": skipped + [f"{u.domain}::{u.op} ({len(u.nodes)} node(s)): {u.reason}" for u in found.uncovered]}
    return doc, skipped


def census_of(path: Path, dims: dict[str, int], catalog, work: Path, timeout: float = 240.0, loss: str = "mse",
              frozen: list[str] | None = None, log=print):
    """The census of an ONNX model (forward: its training graph built first), a training graph or an artifacts
    directory, as `opconform model` takes it (harness.model.command)."""
    source = classify(path)
    work.mkdir(parents=True, exist_ok=True)
    if source.kind == "forward":
        log(f"building the training graph of {path} with generate_artifacts (loss {loss})...")
        source.training = build(path, work / "training", loss, frozen or [], timeout)
    assert source.training is not None
    graph = onnx.load(str(source.training))
    log(f"running the training graph once ({len(graph.graph.node)} nodes) to read every tensor's shape...")
    table, _crash = run_graph(source.training, dims, work / "tensors.json", timeout, log)
    tensors = _tensors(table, declared_shapes(graph))
    specs = catalog.select(None)
    return census(graph, tensors, specs, dims), specs


def list_from_graph(path: Path, dims: dict[str, int], catalog, out: Path, name: str | None = None, log=print,
                    **options) -> Path:
    """Write the workload list of a graph's configurations to `out` (JSON) and return it."""
    work = out.parent / (out.stem + "-census")
    work.mkdir(parents=True, exist_ok=True)
    found, specs = census_of(path, dims, catalog, work, log=log, **options)
    doc, skipped = from_census(found, specs, name or model_name(path), what=f"from {path}")
    for line in doc["left_out"]:
        log(f"  not a workload: {line}")
    if not doc["configurations"]:
        raise ModelListError(f"{path}: none of its gradient nodes matched a spec case (see the lines above)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"{doc['model']}: {len(doc['configurations'])} configurations of {doc['gradient_nodes']} gradient-side nodes "
        f"as workloads ({out})")
    return out
