"""Vector-Jacobian products of the broadcasting binary ops, as a training graph computes them: each input's
gradient summed back over the axes broadcasting stretched (reference._math.unbroadcast)."""
import numpy as np

from reference._math import unbroadcast


def mul_vjp(dY, A, B):
    dY = np.asarray(dY, dtype=np.float64)
    return unbroadcast(dY * B, np.shape(A)), unbroadcast(dY * A, np.shape(B))


def case_shapes(params):
    """{A, B, dY} from the case param `shapes: [A's shape, B's shape]`; dY has their broadcast shape."""
    a, b = (tuple(int(d) for d in s) for s in params["shapes"])
    return {"A": a, "B": b, "dY": tuple(np.broadcast_shapes(a, b))}
