"""One configuration of a real graph's node as a spec sees it: what a spec's `cases.from_node` hook reads.

For a kernel spec (ConvGrad, GatherGrad, ...) the node is the gradient node itself and `shapes` are its inputs by the
spec's input names. For a training-graph spec (`<Forward>Gradient`) the node is the forward node whose gradient the
builder writes: its forward inputs by name, and each grad_output shaped as the forward output it is the gradient of.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class NodeConfig:
    op: str                                         # the spec's op (ConvGrad, MatMulGradient, ...)
    shapes: dict[str, tuple[int, ...] | None]       # spec input name -> shape (None: the node leaves it out)
    dtypes: dict[str, str] = field(default_factory=dict)          # spec input name -> numpy dtype name
    values: dict[str, np.ndarray] = field(default_factory=dict)   # small integer inputs the graph fixes: its
    # constants (initializers, Constant nodes) and Shape outputs (GatherGrad's shape); never data (ids, labels)
    attributes: dict[str, Any] = field(default_factory=dict)      # as written on the node
    outputs: tuple[str, ...] = ()                   # the spec outputs the graph uses (empty: all of them)
    output_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # kernel nodes: spec output -> shape

    def shape(self, name: str) -> tuple[int, ...]:
        found = self.shapes.get(name)
        if found is None:
            raise KeyError(f"the node has no input {name}")
        return found

    def value(self, name: str) -> list:
        """A constant input's value as a list (ints for integer tensors); KeyError when it is not a constant."""
        if name not in self.values:
            raise KeyError(f"input {name} is not a constant of the graph")
        return np.asarray(self.values[name]).tolist()
