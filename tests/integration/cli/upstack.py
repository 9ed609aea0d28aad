"""A real ``gpuledger up`` as a subprocess for CLI tests, and a runner of ``gpuledger`` commands.

The data dir lives outside pytest's 0700 temp root: PostgreSQL runs as another user when we are
root, and a concurrent pytest session re-chmods /tmp/pytest-of-<user>.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from services.cli.main import run; run()"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

INVENTORY = "sn,cpu_milli,memory_mib,gpu,model\nnode-a,64000,262144,2,V100M32\nnode-b,32000,131072,1,T4\n"
"""A small node CSV (3 GPUs on two nodes) for ``up --inventory``."""
POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {namespace}
  labels: {{tensor-fusion.ai/enabled: "true"}}
  annotations: {{tensor-fusion.ai/tflops-request: "{tflops}", tensor-fusion.ai/vram-request: 4Gi}}
spec:
  containers: [{{name: main, image: python:3.11}}]
"""
"""A TensorFusion pod: ``POD.format(name=, namespace=, tflops=)``."""


def default_sigint() -> None:
    """``preexec_fn`` of every child the CLI tests start: SIGINT back to its default. A shell
    starts a background job (``pytest ... &``) with SIGINT ignored, and an ignored signal stays
    ignored across exec, so without this the Ctrl-C tests' SIGINT would never reach the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class UpStack:
    """``gpuledger up [args]`` run in ``cwd``; its output goes to ``log``."""

    def __init__(self, cwd: Path, *args: str, log: Path) -> None:
        self.cwd, self.log = cwd, log
        self._out = log.open("ab")
        self.process = subprocess.Popen([*CLI, "up", *args], cwd=cwd, env=ENV, stdout=self._out,
                                        stderr=subprocess.STDOUT, preexec_fn=default_sigint)

    def wait_up(self, timeout_s: float = 240) -> None:
        """Wait for ``gpuledger is up``; AssertionError with the log's tail when it ends or times out."""
        deadline = time.monotonic() + timeout_s
        while "gpuledger is up" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gpuledger up did not come up:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.2)

    def interrupt(self) -> int:
        """SIGINT (Ctrl-C) and wait; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        code = self.process.wait(90)
        self._out.close()
        return code


def gpuledger(*args: str, cwd: Path | None = None, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    """Run one ``gpuledger`` command to its end."""
    return subprocess.run([*CLI, *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout_s,
                          check=False, preexec_fn=default_sigint)


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    """The JSON stdout of a ``--json`` command (AssertionError with its output otherwise)."""
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (exit {done.returncode}): {done.stdout}{done.stderr}") from None
