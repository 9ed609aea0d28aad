"""One ``gpuledger up`` per data dir: the lock is exclusive across processes, names its holder,
and is released when the holder goes away (however it ends)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.datalock import DataDirLock, DataDirLocked

HOLD = """
import sys, time
from pathlib import Path
from services.cli.datalock import DataDirLock
lock = DataDirLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_holder_is_refused_with_the_first_ones_pid(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirLocked) as refused:
            DataDirLock(tmp_path).acquire()
        assert refused.value.holder["pid"] == holder.pid
        assert f"pid {holder.pid}" in str(refused.value) and str(tmp_path) in str(refused.value)
    finally:
        holder.kill()
        holder.wait()
    with DataDirLock(tmp_path) as lock:  # the kernel released it with the process
        assert lock.path.is_file()


def test_release_lets_the_next_one_in(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path / "new")
    first.acquire()
    first.release()
    second = DataDirLock(tmp_path / "new")
    second.acquire()
    second.release()
