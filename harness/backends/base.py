"""The backend interface: run one case's inputs, or say why not.

A backend never raises for a case: every way a run can end is an Outcome, so one bad case (or one
crashing library) cannot end a conformance run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from harness.backends.limits import DEFAULT_TIMEOUT, TIMEOUT_OPTION
from harness.core.sequences import Value
from harness.core.timing import Budget, repeat
from harness.spec.model import Export, Spec


@dataclass(frozen=True)
class ForwardCall:
    """The forward computation a case's inputs stand for, for backends that differentiate a forward graph
    themselves (ort-autograd) instead of calling the gradient op."""
    inputs: dict[str, np.ndarray | None]  # the forward op's inputs by its names, in their case dtypes
    attributes: dict  # the forward node's attributes as the case writes them (the rest: the op's defaults)
    missing: str = ""  # why the case cannot run from its forward inputs (values planted in a forward output)
    export: Export | None = None  # the group's `export`: how an exporter would write the forward graph
    seed: int = 0  # the case's seed: the forward op's own random draws (forward.draws) are made with it


@dataclass(frozen=True)
class Request:
    spec: Spec
    dtype: str  # the case dtype
    inputs: list[Value | None]  # in the spec's input order; None = omitted optional input (a list: a sequence)
    attributes: dict  # only the attributes written on the node; the rest take their defaults
    outputs: tuple[bool, ...]  # which of the spec's outputs are requested
    threads: int = 1
    timeout: float | None = None  # a case's own limit (spec group `timeout`); None: the backend's
    # thread_invariance check: split the work across `threads` however small the case (THREAD_INVARIANT
    # backends honour it; normally small cases run on one thread and the split would go untested)
    force_split: bool = False
    forward: ForwardCall | None = None  # None: the spec has no forward op
    # Ask for the outputs in buffers filled beforehand with NaN (the type's most negative integer for integers),
    # where the backend can (ort: IOBinding): a kernel that leaves part of an output unwritten then shows it in
    # every run instead of in some. Reruns of a case an intermittent known divergence covers ask for it.
    poison_outputs: bool = False

    def named_inputs(self) -> dict[str, Value | None]:
        return {i.name: v for i, v in zip(self.spec.inputs, self.inputs)}


@dataclass(frozen=True)
class Outputs:
    values: list[Value | None]  # in the spec's output order; None where not requested; a list: a sequence
    # What really computed them, where the backend chose it (ort-autograd: the gradient nodes ORT's
    # builder inserted, e.g. "com.microsoft.SoftmaxGrad_13(axis=1)"); recorded in the result.
    nodes: tuple[str, ...] = ()
    # The forward op's own random draws (forward.draws: Dropout's mask) as the backend's graph drew them: the
    # expected values are computed with these instead of the case's (harness.run.engine.judge).
    draws: dict[str, np.ndarray] = field(default_factory=dict)


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
    cause: str = ""  # what happened, when not "worker killed by <signal>" (a command backend's own words)

    def describe(self) -> str:
        return (self.cause or f"worker killed by {self.signal}") + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class TimedOut:
    seconds: float
    limit: str = TIMEOUT_OPTION  # the name of the limit that fired, for the message (harness.backends.limits)

    def __str__(self) -> str:
        return f"no answer within its {self.seconds:g} s {self.limit} (a hang)"


Outcome = Outputs | Rejected | Unsupported | Crashed | TimedOut

# What a probe can say about one (op, dtype) on one backend. `error`: the probe itself failed, so it
# cannot tell; cases then run and show for themselves.
SUPPORT_STATUSES = ("supported", "not_registered", "no_kernel", "unavailable", "error")
GATING_STATUSES = ("not_registered", "no_kernel", "unavailable")  # cases are reported unsupported, not run


@dataclass(frozen=True)
class Support:
    """A backend's capability for one (op, dtype): see harness.run.probe."""
    status: str  # one of SUPPORT_STATUSES
    how: str = ""  # when supported: kernel, function_body, cast+kernel, cast+function_body, reference, assumed, declared (a plugin's `ops`)
    reason: str = ""  # the evidence, or why not

    @property
    def gates(self) -> bool:
        """True when the backend's cases for this (op, dtype) are reported unsupported instead of run."""
        return self.status in GATING_STATUSES


@dataclass
class Backend:
    """Subclasses set `name` and implement run(); availability() says why a backend cannot run here."""
    threads: int = 1
    THREAD_INVARIANT = False  # True: outputs are bitwise the same at any thread count (checked per case)
    # The spec subjects (harness.spec.model.Subject) it runs; a training_graph spec on a backend without it is
    # not_registered, decided without running anything (harness.run.probe).
    SUBJECTS: ClassVar[tuple[str, ...]] = ("kernel",)
    # True where the outputs are a training graph's gradients of the forward op (ort-autograd): in groups marked
    # derivative_differs they are judged by the spec's forward.derivative, not the gradient op's contract.
    DIFFERENTIATES_FORWARD: ClassVar[bool] = False
    timeout: float = DEFAULT_TIMEOUT
    name: str = field(default="", init=False)
    # Another backend whose spec `known_divergences` also apply here because it runs the same kernels
    # (onnxruntime reached through its ONNX backend API on CPU is `ort`'s kernels): None for most.
    divergences_from: str | None = field(default=None, init=False)
    # False where the backend reaches those kernels through graphs of its own (ort-autograd), so that an
    # inherited divergence that does not show here (another node rejects the case first) is no evidence
    # against the spec: only the backend's own declared divergences must reproduce.
    inherited_must_reproduce: bool = field(default=True, init=False)

    def availability(self) -> str | None:
        """None when the backend can run here, else the reason it cannot."""
        return None

    def run(self, request: Request) -> Outcome:
        raise NotImplementedError

    def probe(self, request: Request) -> Support:
        """Whether this backend really runs request.spec in request.dtype, and how (harness.run.probe calls
        it with one representative valid case). Backends that cannot tell are assumed to; a case they
        cannot run still shows as unsupported when run() returns Unsupported."""
        return Support("supported", "assumed", f"{self.name} has no capability probe; assumed to run what it accepts")

    def time(self, request: Request, budget: dict) -> list[float] | Outcome:
        """Seconds per call of the request, repeated as harness.core.timing.Budget(**budget) says
        (`opconform bench`), or the outcome that kept it from running. This default times run() in
        this process; worker-based backends time inside their worker, without the round trip."""
        outcome = self.run(request)
        if not isinstance(outcome, Outputs):
            return outcome
        return repeat(lambda: self.run(request), Budget(**budget))

    def environment(self) -> dict:
        return {}

    def close(self) -> None:
        pass
