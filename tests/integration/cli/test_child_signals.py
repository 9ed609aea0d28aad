"""The CLI tests' children get the default SIGINT handler back (``upstack.default_sigint``), so
their Ctrl-C tests also pass when pytest itself was started with SIGINT ignored (a background
job of a shell: ``pytest ... &``)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.integration.cli.upstack import default_sigint

CHILD = [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"]


@pytest.fixture
def sigint_ignored() -> Iterator[None]:
    """This process ignores SIGINT, as a shell's background job does (inherited by its children)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted(**popen: object) -> int | None:
    """Start CHILD, send it SIGINT once it runs; its exit code, or None if it ignored SIGINT."""
    child = subprocess.Popen(CHILD, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             **popen)  # type: ignore[call-overload]
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGINT)
        return int(child.wait(3))
    except subprocess.TimeoutExpired:
        return None
    finally:
        child.kill()
        child.wait()


def test_a_child_with_default_sigint_stops_on_ctrl_c(sigint_ignored: None) -> None:
    assert _interrupted() is None  # the problem: the ignored SIGINT is inherited across exec
    assert _interrupted(preexec_fn=default_sigint) == -signal.SIGINT  # KeyboardInterrupt ends the child
