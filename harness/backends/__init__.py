"""Backend registry: the names the CLI, the pytest suite and the specs use, and how to make each backend.

Four kinds of name:
- built in: reference, openmp, ort, ort-cuda, ort-autograd (FACTORIES);
- plugins: installed packages in the `opconform.backends` entry-point group (harness.backends.plugin);
- `onnx-backend:MODULE[@DEVICE]`: any module implementing the ONNX backend API (harness.backends.onnx_backend);
- command backends: NAME=TEMPLATE defined for this process with define_command (harness.backends.command).

Only the built-in EXPECTED backends fail a verdict by being unavailable, unless the user names
another one to run (then it must be available too).
"""
from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING

from harness.backends.limits import DEFAULT_TIMEOUT
from harness.spec.names import unknown_name

if TYPE_CHECKING:
    from harness.backends.base import Backend

# The backend classes are imported when one is used, not with the registry: their modules pull in
# numpy, onnx and the spec models, and `opconform` must answer (a usage error, a misspelt op, its
# first progress line) before those load.
_CLASSES = {"Backend": "harness.backends.base", "ReferenceBackend": "harness.backends.reference",
            "OpenmpBackend": "harness.backends.openmp", "OrtBackend": "harness.backends.ort",
            "OrtCudaBackend": "harness.backends.ort", "OrtAutogradBackend": "harness.backends.ort_autograd"}


def __getattr__(name: str):
    if name in _CLASSES:
        return getattr(importlib.import_module(_CLASSES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Factories(dict):
    """name -> Backend class; a value given as the class's name is imported on first use."""

    def __getitem__(self, name):
        value = super().__getitem__(name)
        if isinstance(value, str):
            value = __getattr__(value)
            super().__setitem__(name, value)
        return value

    def get(self, name, default=None):
        return self[name] if name in self else default

    def values(self):
        return [self[name] for name in self]

    def items(self):
        return [(name, self[name]) for name in self]


FACTORIES = _Factories({
    "reference": "ReferenceBackend",
    "openmp": "OpenmpBackend",
    "ort": "OrtBackend",
    "ort-cuda": "OrtCudaBackend",
    "ort-autograd": "OrtAutogradBackend",
})
# Defaults that are unavailable here (ort-cuda without a GPU) are skipped, their reason recorded.
DEFAULT = ("reference", "openmp", "ort", "ort-cuda", "ort-autograd")
# The backends the gate exists to check: one unavailable fails the verdict (a broken build must not
# pass as green) unless the user leaves it out on purpose (harness.run.rundir.missing_expected).
EXPECTED = ("reference", "openmp", "ort", "ort-autograd")
ONNX_BACKEND = "onnx-backend:"
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")  # plugin and command backend names

_commands: dict[str, str] = {}  # name -> template, defined by --command-backend for this process


class UnknownBackend(ValueError):
    pass


def plugins() -> list[str]:
    from harness.backends.plugin import discover  # lazy: plugin entry points are scanned only when a plugin is named or listed

    return [name for name in discover() if name not in FACTORIES]


def commands() -> dict[str, str]:
    return dict(_commands)


def define_command(definition: str) -> str:
    """Register NAME=TEMPLATE as a command backend for this process; returns NAME. A bad name or
    template raises UnknownBackend with the reason."""
    from harness.backends.command import CommandBackend  # lazy: a backend's module loads when it is used

    name, sep, template = definition.partition("=")
    name = name.strip()
    if not sep or not template.strip():
        raise UnknownBackend(f"command backend {definition!r}: write NAME=TEMPLATE, e.g. "
                             "my-gelu='./gelu_grad {model} {inputs} {outputs}'")
    if not NAME.match(name):
        raise UnknownBackend(f"command backend name {name!r}: use letters, digits, '-', '_' and '.', starting with a letter")
    if name in FACTORIES or name in plugins() or name.startswith(ONNX_BACKEND):
        raise UnknownBackend(f"command backend name {name!r} is already a backend; choose another")
    try:
        CommandBackend(label=name, template=template)
    except ValueError as e:
        raise UnknownBackend(f"command backend {name}: {e}") from None
    _commands[name] = template
    return name


def known() -> list[str]:
    """Every backend name usable here, built-ins first (onnx-backend:MODULE names are open-ended)."""
    return [*FACTORIES, *plugins(), *_commands]


def defaults() -> list[str]:
    """What runs when no backend is named: the built-in defaults, installed plugins, defined commands."""
    return [*DEFAULT, *plugins(), *_commands]


def check(name: str) -> None:
    """Raise UnknownBackend (with what is known and the syntax) unless `name` can be created."""
    if name in FACTORIES or name in _commands or name in plugins():
        return
    if name.startswith(ONNX_BACKEND):
        from harness.backends.onnx_backend import parse  # lazy: a backend's module loads when it is used

        try:
            parse(name)
        except ValueError as e:
            raise UnknownBackend(str(e)) from None
        return

    raise UnknownBackend(unknown_name("backend", name, known()) + f"; or {ONNX_BACKEND}MODULE for a module implementing "
                         "the ONNX backend API, or a command backend defined with --command-backend NAME=TEMPLATE")


def create(name: str, threads: int = 1, timeout: float = DEFAULT_TIMEOUT) -> Backend:
    check(name)
    if name in FACTORIES:
        return FACTORIES[name](threads=threads, timeout=timeout)
    if name in _commands:
        from harness.backends.command import CommandBackend  # lazy: a backend's module loads when it is used

        return CommandBackend(threads=threads, timeout=timeout, label=name, template=_commands[name])
    if name.startswith(ONNX_BACKEND):
        from harness.backends.onnx_backend import OnnxBackendAdapter, parse  # lazy: a backend's module loads when it is used

        module, device, kwargs = parse(name)
        return OnnxBackendAdapter(threads=threads, timeout=timeout, module=module, device=device, prepare_kwargs=kwargs)
    from harness.backends.plugin import PluginBackend  # lazy: a backend's module loads when it is used

    return PluginBackend(threads=threads, timeout=timeout, entry=name)


def subjects(name: str) -> tuple[str, ...]:
    """The spec subjects a backend runs: its class's SUBJECTS (a plugin runs a training_graph spec it declares;
    command and ONNX-backend adapters run single nodes)."""
    if name in FACTORIES:
        return FACTORIES[name].SUBJECTS
    if name in _commands:
        from harness.backends.command import CommandBackend  # lazy: a backend's module loads when it is used

        return CommandBackend.SUBJECTS
    if name.startswith(ONNX_BACKEND):
        from harness.backends.onnx_backend import OnnxBackendAdapter  # lazy: a backend's module loads when it is used

        return OnnxBackendAdapter.SUBJECTS
    from harness.backends.plugin import PluginBackend  # lazy: a backend's module loads when it is used

    return PluginBackend.SUBJECTS


def worker_classes(names) -> list[type]:
    """The built-in backend classes among `names` (their worker templates can start early)."""
    return [FACTORIES[n] for n in names if n in FACTORIES]
