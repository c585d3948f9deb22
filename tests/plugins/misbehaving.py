"""Backend plugins that break in every way the harness must survive (tests/test_plugins.py registers
them as entry points of a throwaway distribution). ReluGrad only; each runs in the isolated worker."""
import os
import signal
import time

import numpy as np


class _Base:
    api_version = 1
    ops = {"ReluGrad": ["float32"]}

    def relu_grad(self, call):
        return {"dX": np.where(call.inputs["X"] > 0, call.inputs["dY"], 0).astype(call.inputs["dY"].dtype)}


class Correct(_Base):
    def run(self, call):
        if call.inputs["dY"].shape != call.inputs["X"].shape:
            from harness.backends.plugin_api import Rejected
            raise Rejected("dY and X differ in shape")
        return self.relu_grad(call)


class Segfaults(_Base):
    def run(self, call):
        os.kill(os.getpid(), signal.SIGSEGV)


class Hangs(_Base):
    def run(self, call):
        time.sleep(600)


class RaisesEverywhere(_Base):
    def run(self, call):
        raise KeyError("no such buffer")


class ReturnsText(_Base):
    def run(self, call):
        return "done"


class WrongDtype(_Base):
    def run(self, call):
        return [self.relu_grad(call)["dX"].astype(np.float64)]


class OldApi(_Base):
    api_version = 0

    def run(self, call):
        return self.relu_grad(call)


class NeedsGpu(_Base):
    def availability(self):
        return "no GPU here"

    def run(self, call):
        return self.relu_grad(call)
