"""Allocator replicas (``python -m services.allocator``) and readers (``python -m
services.allocator.reader``) as real subprocesses, for kill -9 tests and read storms."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from services.shared.natsserver import free_port

FAST_ENV = {"GPULEDGER_LEASE_TTL_S": "1.5", "GPULEDGER_LEASE_RENEW_S": "0.3", "GPULEDGER_HEARTBEAT_CHECK_S": "0",
            "GPULEDGER_FETCH_WAIT_S": "0.2", "GPULEDGER_RETRY_DELAY_S": "0.05", "GPULEDGER_RETRY_MAX_S": "0.5",
            "GPULEDGER_TAIL_INTERVAL_S": "0.05"}


class AllocatorProcess:
    """One ``python -m services.allocator`` child (``module`` another entry point, e.g. the
    reader's) with its own HTTP port and log file."""

    def __init__(self, name: str, *, nats_url: str, database_url: str, log_dir: Path,
                 module: str = "services.allocator", **env: str) -> None:
        self.name = name
        self.port = free_port()
        self.log_path = log_dir / f"{module.rsplit('.', 1)[-1]}-{name}.log"
        environ = {**os.environ, **FAST_ENV, "GPULEDGER_HOLDER": name, **env, "GPULEDGER_NATS_URL": nats_url,
                   "GPULEDGER_DATABASE_URL": database_url, "GPULEDGER_HTTP_PORT": str(self.port)}
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen([sys.executable, "-m", module], env=environ,
                                        stdout=self._log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> Any:
        """GET ``path`` on this replica's HTTP API as JSON (raises OSError when not answering)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
            return json.loads(response.read())

    def ready(self) -> dict[str, Any] | None:
        """The /readyz document, or None while not ready or not answering."""
        try:
            body: dict[str, Any] = self.get("/readyz")
        except OSError:
            return None
        return body

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets (and PostgreSQL its locks) but runs no code."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def terminate(self, timeout_s: float = 30) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout_s)
        self._log.close()
        return code

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_ready(*replicas: AllocatorProcess, timeout_s: float = 60) -> list[dict[str, Any]]:
    """Wait until every replica answers /readyz with 200; returns their documents."""
    deadline = time.monotonic() + timeout_s
    while True:
        docs = [r.ready() for r in replicas]
        if all(doc is not None for doc in docs):
            return [doc for doc in docs if doc is not None]
        for r in replicas:
            if r.process.poll() is not None:
                raise AssertionError(f"allocator {r.name} exited: {r.log_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("allocators not ready: " + " | ".join(r.log_text()[-1500:] for r in replicas))
        time.sleep(0.05)
