"""The backend interface: run one case's inputs, or say why not.

A backend never raises for a case: every way a run can end is an Outcome, so one bad case (or one
crashing library) cannot end a conformance run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.spec.model import Spec


@dataclass(frozen=True)
class Request:
    spec: Spec
    dtype: str  # the case dtype
    inputs: list[np.ndarray | None]  # in the spec's input order; None = omitted optional input
    attributes: dict  # only the attributes written on the node; the rest take their defaults
    outputs: tuple[bool, ...]  # which of the spec's outputs are requested
    threads: int = 1

    def named_inputs(self) -> dict[str, np.ndarray | None]:
        return {i.name: v for i, v in zip(self.spec.inputs, self.inputs)}


@dataclass(frozen=True)
class Outputs:
    values: list[np.ndarray | None]  # in the spec's output order; None where not requested


@dataclass(frozen=True)
class Rejected:
    """The backend refused the inputs (an error status or exception): right for invalid inputs."""
    message: str


@dataclass(frozen=True)
class Unsupported:
    """The backend cannot run this dtype or feature at all (no kernel, unregistered type)."""
    reason: str


@dataclass(frozen=True)
class Crashed:
    signal: str  # e.g. SIGSEGV, or "exit 3"
    detail: str = ""  # the tail of the worker's stderr


@dataclass(frozen=True)
class TimedOut:
    seconds: float


Outcome = Outputs | Rejected | Unsupported | Crashed | TimedOut


@dataclass
class Backend:
    """Subclasses set `name` and implement run(); availability() says why a backend cannot run here."""
    threads: int = 1
    timeout: float = 20.0
    name: str = field(default="", init=False)

    def availability(self) -> str | None:
        """None when the backend can run here, else the reason it cannot."""
        return None

    def run(self, request: Request) -> Outcome:
        raise NotImplementedError

    def environment(self) -> dict:
        return {}

    def close(self) -> None:
        pass
