"""SIGTERM as an exception, so that cleanup code runs when a job is stopped from outside.

Python's default SIGTERM action ends the process at once: no ``finally`` block runs, so a
supervisor killed by ``timeout``, a batch scheduler or asv leaves its children running (a
launch's agent and ranks live in a session of their own, which the parent's process group
does not reach). While :func:`sigterm_raises` is active in the main thread, SIGTERM raises
:class:`Terminated` instead, and the caller's ``finally`` stops what it started. Elsewhere
(another thread, or a handler someone else installed) it changes nothing.
"""
from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM; exits with 143 (128 + SIGTERM) if not caught."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _raise(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises():
    """Within the block, SIGTERM raises :class:`Terminated` (main thread, default handler
    only); the previous handler is restored on the way out."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
