"""Resolve `module.path:function` strings, the spec's hooks into Python.

`resolve` imports whatever it is given: the harness's own code and tests use it for handlers and
helpers they choose themselves. A spec is data from a pull request, so the functions it names go
through `resolve_hook`, which refuses (before importing anything) a module outside the project's
`reference` package or a package the spec tree declares, and a function defined elsewhere (one a
reference module merely imported). `call_problem` checks a hook's signature against the arguments
the harness will pass.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from functools import cache

PROJECT_PACKAGE = "reference"


class DottedError(ValueError):
    pass


@cache
def resolve(path: str):
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise DottedError(f"cannot import module '{module_name}' ({e})") from None
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise DottedError(f"module '{module_name}' has no function '{attr}'") from None
    if not callable(fn):
        raise DottedError(f"'{path}' is not a function")
    return fn


def inside(module_name: str, packages) -> bool:
    return any(module_name == p or module_name.startswith(p + ".") for p in packages)


def package_problem(name: str) -> str | None:
    """Why a spec tree may not declare `name` as a hook package (None: it may)."""
    if not name.isidentifier():
        return f"'{name}' is not a top-level package name"
    if name in sys.stdlib_module_names or name in ("harness", "builtins"):
        return f"'{name}' is {'the harness' if name == 'harness' else 'part of the standard library'}, not a package of references"
    return None


def resolve_hook(path: str, packages=(PROJECT_PACKAGE,)):
    """The function a spec names; DottedError (nothing imported) when it lies outside `packages`."""
    module_name, _, attr = path.partition(":")
    if not inside(module_name, packages):
        raise DottedError(f"'{module_name}' is outside the packages a spec may name ({', '.join(packages)}); "
                          f"put the function in the {PROJECT_PACKAGE} package or declare its package in "
                          "specs/_defaults/hooks.yaml (packages: [...])")
    fn = resolve(path)
    defined_in = getattr(inspect.unwrap(fn), "__module__", None) or ""
    if not inside(defined_in, packages):
        raise DottedError(f"'{path}' is {defined_in or 'a builtin'}'s function imported into {module_name}; "
                          f"name a function defined in {', '.join(packages)}")
    return fn


def call_problem(fn, path: str, positional: int = 0, keywords=()) -> str | None:
    """Why fn cannot be called with `positional` arguments and these keywords (None: it can)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # no signature to read (a builtin): the call itself will tell
    try:
        signature.bind(*[None] * positional, **{name: None for name in keywords})
    except TypeError as e:
        passed = [f"{positional} positional argument(s)"] if positional else []
        passed += [f"keywords {', '.join(keywords)}"] if keywords else []
        return (f"{path}{signature} cannot take what the harness passes ({'; '.join(passed) or 'nothing'}): "
                f"{e}")
    return None
