"""Reading an ORT probe: does onnxruntime run an op in a dtype, and how.

The evidence is what ORT itself reports, not its declared schemas (which claim more than it runs):
- session creation fails with a type error: the schema does not register the dtype (not_registered);
- it fails with NOT_IMPLEMENTED: no kernel for the op in that dtype, or (when the missing kernel is
  another op's) the op was inlined as its function body and one of the body's ops has none (no_kernel);
- it runs: the profiled session lists every kernel that ran, with its provider and its types.
  The op's own name among them means its kernel ran (else the inlined function body's ops did); if
  those kernels produced another float type than the one requested, ORT inserted Casts around them (cast);
  if they ran on a provider other than the one asked for, ORT fell back (no kernel on that provider).
"""
from __future__ import annotations

import re

from harness.backends.base import Support
from harness.spec.model import Spec

# The type names of ORT's profiler, as dtype names.
_PROFILE_TYPES = {"float": "float32", "double": "float64", "float16": "float16", "MLFloat16": "float16",
                  "bfloat16": "bfloat16", "BFloat16": "bfloat16"}


def float_types(names: list[str]) -> set[str]:
    return {_PROFILE_TYPES[n] for n in names if n in _PROFILE_TYPES}


def classify_error(op: str, dtype: str, phase: str, cls: str, message: str) -> Support:
    """A probe that ORT refused: not registered, no kernel, no provider, or an error it cannot judge."""
    message = " ".join(message.split())
    if phase == "session" and cls == "InvalidGraph" and "Type Error" in message:
        return Support("not_registered", reason=f"the op schema does not accept {dtype}: {message}")
    if phase == "session" and cls == "NotImplemented" and "Could not find an implementation" in message:
        missing = re.search(r"implementation for (\w+)\((\d+)\)", message)
        if missing and missing.group(1) != op:
            return Support("no_kernel", reason=f"{op} is inlined as its function body, whose {missing.group(1)}"
                                               f"({missing.group(2)}) node has no {dtype} kernel: {message}")
        return Support("no_kernel", reason=f"no {dtype} kernel registered for {op}: {message}")
    if cls == "ProviderUnavailable":
        return Support("unavailable", reason=message)
    return Support("error", reason=f"the probe case failed ({cls} at {phase}): {message}")


def classify_run(spec: Spec, dtype: str, kernels: list[dict], provider: str) -> Support:
    """A probe that ran: which kernels, on which provider, in which types."""
    own = [k for k in kernels if k["op"] == spec.op]
    # Without the op's own kernel, the op was replaced by its function body: the other ops that ran,
    # except Casts (the harness's bfloat16 Casts, or ORT's inserted ones).
    compute = own or [k for k in kernels if k["op"] != "Cast"]
    if not compute:
        return Support("error", reason=f"the profiled session ran no kernel for {spec.op} (ran: "
                                       f"{', '.join(k['op'] for k in kernels) or 'nothing'})")
    elsewhere = sorted({k["provider"] for k in compute} - {provider})
    if elsewhere:
        return Support("no_kernel", reason=f"no {provider} kernel for {spec.op} in {dtype}: ORT fell back to "
                                           f"{', '.join(elsewhere)} ({', '.join(sorted({k['op'] for k in compute}))})")
    kind = "kernel" if own else "function_body"
    what = (f"{spec.op} kernel on {provider}" if own else
            f"inlined function body on {provider}: {', '.join(k['op'] for k in compute)}")
    # Output types: shape-only nodes of a body (Shape, Squeeze) read the original tensor but compute nothing.
    computed_in = sorted(set().union(*(float_types(k["outputs"]) for k in compute)))
    if computed_in and dtype not in computed_in:
        return Support("supported", f"cast+{kind}", f"ORT inserted Casts: computed in {', '.join(computed_in)}, "
                                                    f"not {dtype}; {what}")
    return Support("supported", kind, f"{dtype} {what}")
