"""Result files that readers see whole (old or new, never truncated), run locks, and whether
a process (a lock's owner, a run's) is still alive.

Not measurement: every layer that writes results (ranks, CLIs, reports, the asv glue) uses these."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """temp file in the same folder + fsync + rename (atomic on POSIX)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results are for everyone to read
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2, default=_default) + "\n")


def _default(obj):
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


class RunLock:
    """``PATH.lock`` holding the writer's pid while a run produces PATH.

    A lock whose pid is alive means another run is writing the same file: refuse (ValueError).
    A lock left by a dead process (a crashed run) is taken over with a warning, and the crashed
    run's temporary files beside PATH are removed.
    """

    def __init__(self, path: str | os.PathLike, warn=None):
        self.path = Path(path)
        self.lock = self.path.with_name(self.path.name + ".lock")
        self.warn = warn or (lambda msg: print(f"warning: {msg}"))

    def __enter__(self) -> "RunLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                fd = os.open(self.lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            with os.fdopen(fd, "w") as f:
                f.write(str(os.getpid()))
            return self

    def _take_over_if_stale(self) -> None:
        try:
            pid = int(self.lock.read_text().strip() or "0")
        except (OSError, ValueError):
            pid = 0
        if pid and alive(pid):
            raise ValueError(f"{self.path} is being written by a running swinkit process "
                             f"(pid {pid}, lock {self.lock}); wait for it or choose another path")
        stale = sorted(self.path.parent.glob(f".{self.path.name}.*.tmp"))
        for tmp in stale:
            tmp.unlink(missing_ok=True)
        self.warn(f"took over stale lock {self.lock} (pid {pid} is gone)"
                  + (f"; removed {len(stale)} leftover temp file(s)" if stale else ""))
        self.lock.unlink(missing_ok=True)

    def __exit__(self, *exc) -> None:
        self.lock.unlink(missing_ok=True)


def alive(pid: int, group: bool = False) -> bool:
    """Whether process ``pid`` (``group``: the process group ``pid``) still exists: signal 0
    checks without sending anything; one this user may not signal exists too. The one
    liveness check of swinkit (a lock's owner, the agent's supervisor, a run's process group).
    A group of zombies (ended, not yet reaped) runs nothing: once the agent has exited, its
    orphans are reaped by init, which in a container can be a process that reaps every second
    or two, and the supervisor must not wait on them.
    """
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return bool(live_groups(lambda p: os.getpgid(p) == pid)) if group else True


def live_groups(in_scope) -> set[int]:
    """The process groups of the live (not zombie) processes whose pid ``in_scope`` accepts
    (a group's members, a session's): one scan of the process table."""
    import psutil
    groups = set()
    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and in_scope(p.pid):
                groups.add(os.getpgid(p.pid))
        except (OSError, psutil.Error):
            continue
    return groups
