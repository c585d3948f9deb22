"""The backend plugin interface, version 1: what a third-party backend receives and returns.

A plugin is an installed package that names a factory in the `opconform.backends` entry-point group:

    [project.entry-points."opconform.backends"]
    my-gelu = "my_gelu_opconform:MyGeluBackend"      # the backend's name = the entry point's name

The factory (a class, or any callable taking no arguments) is called once per worker process and
returns an object with:

    api_version = 1                       # required: the version of this interface it was written for
    ops = {"GeluGrad": ["float32"]}       # optional: op (or "domain::op") -> dtypes it has kernels for;
                                          #   leave it out (or None) to be handed every op and dtype
    thread_invariant = False              # optional: True if outputs are bitwise equal at any thread count
    def run(self, call: Call): ...        # required: outputs by name (a dict) or in `call.outputs` order
    def availability(self) -> str | None  # optional: None, or why it cannot run on this machine
    def environment(self) -> dict         # optional: versions and settings recorded with every run

`run` gets a Call (below) and returns numpy arrays of the output dtypes the op's spec declares
(anything else is reported as a wrong dtype, not converted). It says why it cannot run a call by
raising Unsupported (no kernel for this dtype or feature: counted apart, never a pass) or Rejected
(the inputs are invalid: the right answer to an invalid-input case, a failure on a valid one). Any
other exception counts as a rejection too, and its class is named in the result. The harness runs
the plugin in an isolated worker process, so a segfault or a hang is a result (crashed), not the
end of the run.

Tensors are numpy arrays of any dtype the specs use: float64/32/16, bfloat16 (ml_dtypes.bfloat16),
int32/int64 and bool. The harness only checks `api_version == API_VERSION`; a plugin written for
another version is listed as unavailable with both numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

API_VERSION = 1
ENTRY_POINT_GROUP = "opconform.backends"


@dataclass(frozen=True)
class Call:
    """One case for a plugin: an op, its inputs and its attributes."""
    op: str  # e.g. "GeluGrad"
    domain: str  # e.g. "com.microsoft"
    since_version: int  # the op's opset version
    dtype: str  # the case dtype: float32, float64, float16, bfloat16, int32, int64, bool
    inputs: dict[str, np.ndarray | None]  # by input name, in the op's input order; None = an omitted optional input
    attributes: dict[str, Any]  # every attribute, defaults filled in
    node_attributes: tuple[str, ...]  # the attributes written on the node (the rest took their defaults)
    outputs: tuple[str, ...]  # the output names requested, in the op's output order
    threads: int = 1  # threads the kernel may use
    extra: dict = field(default_factory=dict)  # reserved for later versions


class Rejected(Exception):
    """The inputs are invalid for the op (what an error status is for)."""


class Unsupported(Exception):
    """The backend has no kernel for this op, dtype or feature."""
