"""SIGTERM and SIGINT during a run: held until the run directory can record them, never cutting a write short.

CI timeouts send SIGTERM; a user presses Ctrl-C. Either must leave a run directory whose summary.json says
the run was interrupted, and whose results are whole records. So:

- `hold()` installs this module's handler as the command's very first act (stdlib imports only: the
  interpreter spends its first second importing numpy and pydantic, and a SIGTERM then must not kill it
  with nothing on disk). A signal that arrives while held is remembered, not acted on.
- `arm()` is called once the run directory and its provisional summary exist (or at once, for commands
  without a run directory): a remembered signal is acted on now, and later ones at once, by raising
  `Terminated` (SIGTERM) or KeyboardInterrupt (SIGINT) in the main thread, which ends the run like Ctrl-C.
- `critical()` marks a write that must finish (one compressed record, the final summary): a signal that
  arrives inside it is acted on when it ends.
- After the first signal has been acted on, a further SIGTERM is ignored (the summary being written must
  not be cut short); a further SIGINT still interrupts, outside a critical section.

Standard library only: imported before anything heavy.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNAL_NAMES: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}


class Terminated(KeyboardInterrupt):
    """SIGTERM (what CI timeouts send) during a run: it ends like Ctrl-C, with totals and an
    interrupted verdict in summary.json; the CLI exits 143."""


class _State:
    installed = False
    armed = False
    depth = 0  # critical sections entered
    pending: int | None = None  # a signal held (before arm(), or inside a critical section)
    fired: int | None = None  # the first signal acted on


_state = _State()
_previous: dict[int, object] = {}


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _act(signum: int) -> None:
    if _state.fired is None:
        _state.fired = signum
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _handler(signum, frame) -> None:
    if _state.fired is not None and signum == signal.SIGTERM:
        return  # already ending: the summary being written must not be cut short
    if _state.depth or not _state.armed:
        if _state.pending is None:
            _state.pending = signum
        return
    _act(signum)


def hold() -> bool:
    """Install the handler (main thread only; a no-op elsewhere or when installed already). Signals are
    held until arm(). Returns whether this call installed it."""
    if _state.installed or not _on_main_thread():
        return False
    _state.armed, _state.depth, _state.pending, _state.fired = False, 0, None, None  # before: a signal may come at once
    for signum in SIGNAL_NAMES:
        _previous[signum] = signal.signal(signum, _handler)
    _state.installed = True
    return True


def arm() -> None:
    """From now on a signal interrupts at once; one held so far interrupts now."""
    if not _state.installed:
        return
    _state.armed = True
    _act_on_pending()


def _act_on_pending() -> None:
    if _state.armed and not _state.depth and _state.pending is not None:
        signum, _state.pending = _state.pending, None
        _act(signum)


def release() -> None:
    """Restore the handlers hold() replaced (a held signal is dropped: call arm() first to act on it)."""
    if not _state.installed or not _on_main_thread():
        return
    for signum, previous in _previous.items():
        signal.signal(signum, previous)  # type: ignore[arg-type]  # what signal.signal returned for it
    _previous.clear()
    _state.installed, _state.armed, _state.pending = False, False, None


def installed() -> bool:
    return _state.installed


def fired() -> str | None:
    """The name of the signal that interrupted the command (SIGTERM, SIGINT), if one did."""
    return SIGNAL_NAMES.get(_state.fired) if _state.fired is not None else None


@contextmanager
def critical():
    """A write that must not be cut in the middle: a signal arriving inside waits for its end. (Only the
    main thread is ever interrupted by a signal: elsewhere this is a no-op.)"""
    if not _on_main_thread():
        yield
        return
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
    _act_on_pending()  # only after a normal exit: an exception in flight is not replaced


def started_as_program(name: str = "opconform") -> bool:
    """Whether this process is the `name` console script (its argv[0]), not a test importing the CLI."""
    import os
    import sys

    return bool(sys.argv) and os.path.basename(sys.argv[0]) == name
