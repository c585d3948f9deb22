"""A module with the ONNX backend API that misbehaves as told by the model's op (tests/test_onnx_backend_adapter.py)."""
import os
import unittest

import numpy as np


def supports_device(device):
    return device in ("CPU", "FAKE")


class Rep:
    def run(self, inputs):
        if os.environ.get("FAKE_ONNX_BACKEND") == "segfault":
            os.kill(os.getpid(), 11)
        return [np.where(inputs[1] > 0, inputs[0], 0).astype(inputs[0].dtype)]


def prepare(model, device=None, **kwargs):
    behaviour = os.environ.get("FAKE_ONNX_BACKEND", "")
    if behaviour == "skip":
        raise unittest.SkipTest("com.microsoft opset not released")
    if behaviour == "notimplemented":
        raise NotImplementedError("no ReluGrad here")
    if behaviour == "valueerror":
        raise ValueError("bad model")
    assert model.graph.node[0].op_type  # a ModelProto, as the ONNX backend API says
    return Rep()
