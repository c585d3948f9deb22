"""Resolve `module.path:function` strings, the spec's hooks into Python."""
from __future__ import annotations

import importlib
from functools import cache


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
