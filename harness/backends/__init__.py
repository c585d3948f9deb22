"""Backend registry: the names the CLI and the specs use, and how to make each backend."""
from __future__ import annotations

from harness.backends.base import Backend
from harness.backends.openmp import OpenmpBackend
from harness.backends.ort import OrtBackend, OrtCudaBackend
from harness.backends.reference import ReferenceBackend

FACTORIES = {
    "reference": ReferenceBackend,
    "openmp": OpenmpBackend,
    "ort": OrtBackend,
    "ort-cuda": OrtCudaBackend,
}
# Defaults that are unavailable here (ort-cuda without a GPU) are skipped, their reason recorded.
DEFAULT = ("reference", "openmp", "ort", "ort-cuda")
# The backends the gate exists to check: one unavailable fails the verdict (a broken build must not
# pass as green) unless the user leaves it out on purpose (harness.run.rundir.missing_expected).
EXPECTED = ("reference", "openmp", "ort")


class UnknownBackend(ValueError):
    pass


def create(name: str, threads: int = 1, timeout: float = 20.0) -> Backend:
    if name not in FACTORIES:
        raise UnknownBackend(f"unknown backend '{name}'; known: {', '.join(FACTORIES)}")
    return FACTORIES[name](threads=threads, timeout=timeout)
