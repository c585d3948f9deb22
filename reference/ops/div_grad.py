"""DivGrad (com.microsoft): the gradients of Y = A / B, each summed back over the axes broadcasting stretched.
The math is Div's vector-Jacobian product, written once in reference.ops.elementwise_binary (div_vjp, the
DivGradient training-graph spec's reference, with its shape hooks); this module names it for the kernel spec and
holds the bench and from_node hooks."""
from __future__ import annotations

import math

from reference.ops.elementwise_binary import div_vjp
from reference.ops.elementwise_binary import from_node as _binary_from_node


def div_grad(dY, A, B):
    """(dA, dB) = (unbroadcast(dY / B, A), unbroadcast(-dY * A / B^2, B))."""
    return div_vjp(dY, A, B)


# ---- bench --------------------------------------------------------------------------------------------------------

def bench_bytes(shapes, attributes, params):
    """dY, A and B read, dA and dB written (4 bytes each)."""
    a, b = (math.prod(s) for s in params["shapes"])
    return (math.prod(shapes["dY"]) + 2 * a + 2 * b) * 4


def bench_torch(inputs, attributes):
    """torch autograd's two formulas for div (grad / b and -grad * a / b^2), each reduced to its input's shape
    with sum_to_size, as torch's div backward does."""
    from reference._torch import tensors

    dy, a, b = tensors(*inputs)

    def run():
        return (dy / b).sum_to_size(a.shape), (-dy * a / (b * b)).sum_to_size(b.shape)
    return run


# ---- cases.from_node: a real graph's DivGrad node -> case params ------------------------------------------------

def from_node(node) -> dict:
    """`shapes` = [A's, B's] (the outputs the node asks for, dA and/or dB, are match()'s)."""
    return _binary_from_node(node)
