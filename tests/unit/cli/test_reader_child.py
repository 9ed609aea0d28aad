"""The reader child of ``gpuledger up`` ends with it, even when ``up`` is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

PARENT = """
import subprocess, sys, time
from services.cli.reader_child import end_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                         preexec_fn=end_with_parent if sys.argv[1] == "with" else None)
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by init) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl PR_SET_PDEATHSIG is Linux only")
@pytest.mark.parametrize("mode", ["with", "without"])
def test_the_child_ends_when_its_parent_is_killed(mode: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        # the kernel's signal follows the parent's death at once: the control needs no long wait
        deadline = time.monotonic() + (5 if mode == "with" else 0.5)
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        # with end_with_parent the kernel ends it; without, it would keep serving (the control)
        assert _alive(child) is (mode == "without")
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
