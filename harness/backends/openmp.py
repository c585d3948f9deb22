"""The `openmp` backend: our C/OpenMP kernels (csrc/), called through openmp_lib in an isolated worker.

The library checks every input and returns an error status instead of crashing; it still runs in a
worker like `ort`, so that a kernel bug is a reported crash of one case and not the end of a run.
Inputs and outputs travel positionally: the library's op descriptors use the ONNX node order, as
the specs do (harness checks the counts, so a mismatch is an error, not a silent shift).
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.backends import openmp_lib
from harness.backends.base import Crashed, Outputs, Rejected, Request, Support, TimedOut, Unsupported
from harness.backends.limits import BENCH_LIMIT, BENCH_TIMEOUT
from harness.backends.worker import HandlerError, WorkerBackend
from harness.core.timing import Budget, repeat

# A valid input the library does not handle is a capability gap, not a rejection of the input.
UNSUPPORTED_STATUSES = ("OPC_ERR_UNKNOWN_OP", "OPC_ERR_UNSUPPORTED_DTYPE", "OPC_ERR_NOT_IMPLEMENTED")


@dataclass
class OpenmpBackend(WorkerBackend):
    HANDLER = "harness.backends.openmp:handle"
    # Promises bitwise identical outputs for any thread count (at one ISA level and BLAS core type);
    # the thread_invariance check (harness/run/self_consistency.py) holds it to that on every case.
    THREAD_INVARIANT = True
    LOADING = "loading the C kernel library"  # info(): build_info() plus every op's descriptor

    def __post_init__(self):
        self.name = "openmp"

    def availability(self) -> str | None:
        info = self.info()
        if "error" in info:
            if "IsaUnavailable" in info["error"]:  # OPCONFORM_ISA asks for a level this CPU or build lacks
                return f"the C kernel library cannot run at the requested ISA level: {info['error']}"
            return f"the C kernel library does not load: {info['error']} (reinstall: pip install -e .)"
        return None

    def run(self, request: Request):
        op = self.info().get("ops", {}).get(request.spec.op)
        if op is None:
            return Unsupported(f"the C kernel library has no {request.spec.op}")
        if len(request.inputs) > len(op["inputs"]) or len(request.outputs) != len(op["outputs"]):
            return Rejected(f"{request.spec.op}: the spec has {len(request.inputs)} inputs and "
                            f"{len(request.outputs)} outputs; the C library has {len(op['inputs'])} and "
                            f"{len(op['outputs'])}")
        inputs = list(request.inputs) + [None] * (len(op["inputs"]) - len(request.inputs))
        try:
            reply = self.worker.call({"call": "run", "op": request.spec.op, "inputs": inputs,
                                      "attributes": request.attributes, "outputs": list(request.outputs),
                                      "threads": request.threads, "force_split": request.force_split},
                                     timeout=min(self.timeout, request.timeout or self.timeout))
        except HandlerError as e:
            return _classify(e)
        if isinstance(reply, (Crashed, TimedOut)):
            return reply
        return Outputs(reply)

    def time(self, request: Request, budget: dict):
        if request.spec.op not in self.info().get("ops", {}):
            return Unsupported(f"the C kernel library has no {request.spec.op}")
        try:
            reply = self.worker.call({"call": "bench", "op": request.spec.op, "inputs": list(request.inputs),
                                      "attributes": request.attributes, "outputs": list(request.outputs),
                                      "threads": self.threads, "budget": budget}, timeout=BENCH_TIMEOUT)
        except HandlerError as e:
            return _classify(e)
        return TimedOut(reply.seconds, BENCH_LIMIT) if isinstance(reply, TimedOut) else reply

    def probe(self, request: Request) -> Support:
        """The library declares its dtypes per op: what it declares is what it runs (its own kernels)."""
        op = self.info().get("ops", {}).get(request.spec.op)
        if "error" in self.info():
            return Support("unavailable", reason=self.info()["error"])
        if op is None:
            return Support("not_registered", reason=f"the C kernel library has no {request.spec.op}")
        if request.dtype not in op["dtypes"]:
            return Support("no_kernel", reason=f"the C kernels of {request.spec.op} take {', '.join(op['dtypes'])}")
        return Support("supported", "kernel", f"C kernel for {request.dtype}")

    def environment(self) -> dict:
        info = self.info()
        if "error" in info:
            return {"kernels": "unavailable", "error": info["error"]}
        return {**info["build"], "threads": self.threads}



def _classify(e: HandlerError) -> Rejected | Unsupported:
    if e.cls == "KernelError":
        status, _, message = e.message.partition("|")
        if status in UNSUPPORTED_STATUSES:
            return Unsupported(f"{status}: {message}")
        return Rejected(f"{status}: {message}")
    return Rejected(f"{e.cls}: {e.message}")


# ---- inside the worker ------------------------------------------------------------------------


class KernelError(Exception):
    """openmp_lib.KernelError, flattened to 'STATUS_NAME|message' for the trip to the parent."""


def handle(request: dict):
    if request["call"] == "info":
        return {"build": openmp_lib.build_info(), "ops": {op: openmp_lib.op_info(op) for op in openmp_lib.ops()}}
    try:
        # the bench writes sequence outputs over the inputs they mirror, as ORT's optimizers do (the same bytes moved)
        call, outputs = openmp_lib.prepare(request["op"], request["inputs"], request["attributes"],
                                           want_outputs=request["outputs"], threads=request["threads"],
                                           in_place=request["call"] == "bench")
        with openmp_lib.force_split(request.get("force_split", False)):
            call()
        if request["call"] == "bench":  # the C call alone, into the same outputs: no marshalling, no page faults

            return repeat(call, Budget(**request["budget"]))
        return outputs
    except openmp_lib.KernelError as e:
        raise KernelError(f"{e.status_name}|{e.message}") from None
