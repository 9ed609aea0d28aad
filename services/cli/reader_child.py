"""The reader (``gpuledger api``) as a child process of ``gpuledger up``.

``up`` runs the writer in its own process and one reader beside it, so that nothing a client
asks (a dashboard page, a 1 MiB YAML body to simulate) can pause the writer's loop. The child is
``python -m services.allocator.reader`` with its settings in the environment (the URLs carry
passwords: never on its command line), its output in ``D/api.log``; :func:`start` returns once its
``/readyz`` answers 200, :meth:`ReaderChild.stop` ends it (SIGTERM, then SIGKILL after 15 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from services.shared.natsserver import free_port

LOG_FILE = "api.log"
START_TIMEOUT_S = 90.0
"""Longest the reader may take to load its projection and answer ``/readyz``."""


class ReaderChild:
    """A running reader child: its ``url`` (``http://127.0.0.1:PORT``), process and log path."""

    def __init__(self, process: asyncio.subprocess.Process, url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log

    def readyz(self) -> dict[str, object] | None:
        """The reader's ``/readyz`` body when it answers 200, else None (blocking, 2 s at most)."""
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as response:
                body: dict[str, object] = json.loads(response.read())
                return body
        except (OSError, ValueError, urllib.error.URLError):
            return None

    async def wait_position(self, position: int, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until the reader applied log ``position``; RuntimeError when it exits or times out."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.returncode is not None:
                raise RuntimeError(f"the reader (gpuledger api) exited with {self.process.returncode}; "
                                   f"see {self.log}")
            body = await asyncio.to_thread(self.readyz)
            applied = body.get("position") if body else None
            if isinstance(applied, int) and applied >= position:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the reader did not reach log position {position} within {timeout_s:g} s; "
                                   f"see {self.log}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        """SIGTERM, wait up to 15 s, then SIGKILL."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal the kernel sends this process when its parent dies (Linux)."""


def end_with_parent() -> None:
    """``preexec_fn`` of the reader child: ask the kernel for SIGTERM when ``up`` dies, so a ``up``
    killed with SIGKILL (no chance to stop its children in order) leaves no reader serving a
    stack that is gone. Linux only (prctl PR_SET_PDEATHSIG); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


async def start(*, database_url: str, nats_url: str, port: int, data_dir: Path) -> ReaderChild:
    """Start a reader on 127.0.0.1:``port`` (0: a free one) and wait for its ``/readyz``."""
    port = port or free_port()
    log = data_dir / LOG_FILE
    env = {**os.environ, "GPULEDGER_DATABASE_URL": database_url, "GPULEDGER_NATS_URL": nats_url,
           "GPULEDGER_HTTP_HOST": "127.0.0.1", "GPULEDGER_HTTP_PORT": str(port)}
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.allocator.reader", env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=out, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches `up` alone, which then stops the reader in order
            preexec_fn=end_with_parent)  # and a SIGKILLed `up` takes the reader with it
    child = ReaderChild(process, f"http://127.0.0.1:{port}", log)
    try:
        await child.wait_position(0)
    except BaseException:
        await child.stop()
        raise
    return child
