"""Stopping jobs: SIGTERM as an exception, so that cleanup code runs when a job is stopped
from outside, and the process groups and sessions a job started, stopped on every way out.

Python's default SIGTERM action ends the process at once: no ``finally`` block runs, so a
supervisor killed by ``timeout``, a batch scheduler or asv leaves its children running (a
launch's agent and ranks live in a session of their own, which the parent's process group
does not reach). While :func:`sigterm_raises` is active in the main thread, SIGTERM raises
:class:`Terminated` instead, and the caller's ``finally`` stops what it started. Elsewhere
(another thread, or a handler someone else installed) it changes nothing.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time

from swinkit.result_files import alive, live_groups

KILL_GRACE_S = 5.0


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


def run_in_session(cmd: list[str], cwd=None, grace_s: float = KILL_GRACE_S) -> int:
    """Run ``cmd`` in a session of its own; its exit code. On every way out (it ends, Ctrl-C,
    SIGTERM, an error) every process of that session is stopped: SIGTERM first, so that a launch
    inside it stops its ranks (their sessions are out of this group's reach), SIGKILL after
    ``grace_s``. For a tool (asv) that starts launches in processes of its own."""
    with sigterm_raises():
        proc = subprocess.Popen(cmd, cwd=cwd, start_new_session=True)
        try:
            return proc.wait()
        finally:
            stop_session(proc, grace_s=grace_s)


def stop_session(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """:func:`stop_process_group` for every process group of the session ``proc`` leads: a
    tool may put its children in groups of their own (asv starts its fork server with
    ``setpgid``), and they stay in the session when the leader is gone."""
    _stop(proc, lambda: session_groups(proc.pid), grace_s)


def session_groups(sid: int) -> set[int]:
    """Process groups with a live (not zombie) process in session ``sid``."""
    return live_groups(lambda pid: os.getsid(pid) == sid)


def stop_process_group(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the process group led by ``proc`` (the agent lets its ranks go), then SIGKILL
    whatever is left after ``grace_s``."""
    pgid = proc.pid
    _stop(proc, lambda: {pgid} if alive(pgid, group=True) else set(), grace_s,
          terminate=proc.poll() is None)


def _stop(proc: subprocess.Popen, groups, grace_s: float, terminate: bool = True) -> None:
    """SIGTERM ``groups()`` (when ``terminate``), give ``proc`` and then the groups ``grace_s``
    each to end, SIGKILL what is left, reap ``proc``."""
    if terminate:
        for group in groups():
            _signal_group(group, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + grace_s
    while groups() and time.monotonic() < deadline:
        time.sleep(0.05)
    for group in groups():
        _signal_group(group, signal.SIGKILL)
    if proc.poll() is None:
        proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
