"""Hooks a malformed spec in the corpus names (declared through specs/_defaults/hooks.yaml)."""
from os import getcwd  # noqa: F401  (a spec naming corpus_hooks:getcwd names the standard library's function)


def valid_if_ok(shapes, attributes):
    return None


def valid_if_one_argument(shapes):
    return None


def valid_if_recursive(shapes, attributes):
    return valid_if_recursive(shapes, attributes)


def valid_if_returns_number(shapes, attributes):
    return 0.5


def valid_if_raises(shapes, attributes):
    raise KeyError("dY")


def valid_if_rejects_length_7(shapes, attributes):
    return "dY of 7 elements is not allowed" if shapes["dY"] == (7,) else None


def reference_wants_more(dY, X, scale):
    return dY * X * scale


def reference_without_x(dY):
    return dY


def negative_shapes(params):
    return {"dY": [2, -1], "X": [2, -1]}


def shapes_raise(params):
    return {"dY": params["no_such_param"]}


def valid_if_loops_forever(shapes, attributes):
    while True:
        pass
