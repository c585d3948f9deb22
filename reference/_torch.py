"""NumPy arrays as torch tensors, for the torch peers of `opconform bench` (the `bench.torch` hooks at the end of
reference/ops/<op>.py). torch is an optional extra: each peer imports it when called, and so does this."""
from __future__ import annotations

import numpy as np


def tensors(*arrays):
    """torch tensors sharing the arrays' memory, None staying None."""
    import torch

    def tensor(a):  # torch.from_numpy takes no ml_dtypes.bfloat16: its bits, viewed as torch's bfloat16
        if a.dtype.name == "bfloat16":
            return torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)
        return torch.from_numpy(a)
    return [None if a is None else tensor(a) for a in arrays]
