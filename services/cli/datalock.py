"""The lock of a data dir: one ``gpuledger up`` per directory.

``D/up.lock`` is held with ``fcntl.flock`` (exclusive, non-blocking) for the life of the process;
the kernel releases it when the process ends, however it ends, so a stale file never blocks a
restart. The file records the holder (pid, start time, command line) so that a second ``up`` can
say who holds it. The second ``up`` touches nothing else in the directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

LOCK_FILE = "up.lock"


class DataDirLocked(RuntimeError):
    """Another process holds the data dir; ``holder`` is what it recorded (may be empty)."""

    def __init__(self, data_dir: Path, holder: dict[str, Any]) -> None:
        who = (f"pid {holder.get('pid', '?')}, started {holder.get('started', '?')}" if holder
               else "another process")
        super().__init__(f"data dir {data_dir} is in use by another `gpuledger up` ({who}); "
                         "stop it first or pass another --data-dir")
        self.holder = holder


class DataDirLock:
    """An exclusive lock on ``data_dir`` (created if missing); use as a context manager or call
    :meth:`acquire` / :meth:`release`. :meth:`acquire` raises DataDirLocked when it is held."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_FILE
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock and record this process as its holder."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _holder(handle.read())
            handle.close()
            raise DataDirLocked(self.data_dir, holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "started": datetime.now(UTC).isoformat(timespec="seconds"),
                                 "command": " ".join(sys.argv)}) + "\n")
        handle.flush()
        self._file = handle

    def release(self) -> None:
        """Drop the lock (the file stays; its content is only advice)."""
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _holder(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text)
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
