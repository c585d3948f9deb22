"""Handlers for IsolatedWorker tests: each misbehaves the way a kernel library can."""
import os
import signal
import sys
import time


def handle(request):
    action = request["action"]
    if action == "echo":
        return {"pid": os.getpid(), "value": request.get("value")}
    if action == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if action == "abort":
        os.write(2, b"terminate called without an active exception\n")
        os.abort()
    if action == "hang":
        time.sleep(60)
    if action == "raise":
        raise ValueError("bad input shape")
    if action == "exit":
        os._exit(3)
    if action == "has_module":  # imported before this worker ran any request (its template's preload)
        return request["name"] in sys.modules
    if action == "hangup":  # its connection closed, the process alive: a library that closed every descriptor
        os.write(2, b"closing every descriptor\n")
        os.closerange(3, 65536)
        time.sleep(60)
    if action == "spin":  # busy, never answering: a kernel in an endless loop
        while True:
            pass
