"""What `opconform bench` times: per op, the sizes its spec's `bench:` section names (small, medium, large and
variants such as large-3d), the bytes or floating-point operations one call costs, and PyTorch's equivalent CPU
kernel (the peer to beat), all read from the spec and the hooks at the end of its reference module.

Each size is a case of its spec (harness.core.bench_spec): its inputs are made by the case machinery a run uses,
so they pass the spec's valid_if and value contracts, and are drawn float32 (`opconform bench --dtype` casts
them). Adding an op's benchmark is writing its spec's bench section; no file here names an op.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.core.bench_spec import bench_case, cost, size_problems, torch_peer
from harness.core.cases import Case
from harness.core.contract import input_problems
from harness.core.shapes import CaseError
from harness.core.tensors import make_inputs
from harness.spec.model import Spec

F32 = 4
ELEMENTWISE_SIZES = {"small": 4096, "medium": 256 * 1024, "large": 4 * 1024 * 1024}  # the triad's working sets


class WorkloadError(ValueError):
    """A bench size whose inputs break its spec's contract (a spec bug, named with the op and size)."""


@dataclass(frozen=True)
class Workload:
    op: str
    size: str  # small, medium, large (a suffix names a variant: large-3d)
    shape: str  # shown in the table
    case: Case  # the bench size as a case of the op's spec: what makes its inputs
    attributes: dict = field(default_factory=dict)
    bytes: int | None = None  # memory traffic of one call with float32 data (memory-bound ops)
    fixed_bytes: int = 0  # the part of `bytes` whatever the float type: indices, masks
    flops: float | None = None  # floating-point operations of one call (ConvGrad, GRU)
    torch: Callable[[list], Callable[[], object]] | None = None  # inputs -> a call of torch's kernel
    model: str | None = None  # `bench --model`: the model whose gradient-node configuration this is (harness.bench.model)
    count: int = 1  # how many of the model's nodes share the configuration

    def inputs(self) -> list[np.ndarray | None]:
        """The op's inputs in ONNX order, float32, made as a run makes a case's, and checked against the spec's
        contract as a run checks a valid case (WorkloadError when they break it)."""
        spec = self.case.spec
        # as validate sees it: params, shapes, ranks, valid_if (a model's configuration: its case, checked below)
        problems = [] if self.model else size_problems(spec, self.size)
        if not problems:
            try:
                made = make_inputs(self.case)
            except CaseError as e:
                problems = [str(e)]
            else:
                problems = input_problems(spec, made, self.case.node_attributes)  # as a run checks a valid case
        if problems:
            if self.model:
                raise WorkloadError(f"{self.op} configuration {self.size}: {problems[0]}; fix the workload list")
            raise WorkloadError(f"{self.op} bench size {self.size}: {problems[0]}; fix the spec's bench section")
        return [made[i.name] for i in spec.inputs]

    def bytes_at(self, itemsize: int) -> int | None:
        """`bytes` with the float tensors `itemsize` bytes an element instead of float32's 4."""
        return None if self.bytes is None else (self.bytes - self.fixed_bytes) * itemsize // F32 + self.fixed_bytes


def _number(value) -> int | None:
    return None if value is None else int(value)


def spec_workloads(spec: Spec) -> list[Workload]:
    """The workloads of one spec's bench section, in its order (none without one)."""
    if spec.bench is None:
        return []
    out = []
    for size, chosen in spec.bench.sizes.items():
        case = bench_case(spec, size)
        flops = cost(spec, case, "flops")
        peer = (lambda inputs, spec=spec, case=case: torch_peer(spec, case, inputs)) if spec.bench.torch else None
        out.append(Workload(spec.op, size, chosen.label, case, dict(case.attributes),
                            bytes=_number(cost(spec, case, "bytes")), fixed_bytes=_number(cost(spec, case, "fixed_bytes")) or 0,
                            flops=None if flops is None else float(flops), torch=peer))
    return out


def workloads(catalog, ops: list[str] | None = None, sizes: list[str] | None = None) -> list[Workload]:
    """Every workload of the catalog's specs whose op and size match (globs; None: all), in catalog order."""
    names = [op for op in catalog.all_ops if not ops or any(fnmatch.fnmatchcase(op, p) for p in ops)]
    specs = [catalog.by_op(op) for op in names]
    return [w for spec in specs for w in spec_workloads(spec)
            if not sizes or any(fnmatch.fnmatchcase(w.size, p) for p in sizes)]
