"""``gpuledger up`` as a real subprocess: it comes up, ``submit``/``status``/``simulate`` work against
it, Ctrl-C (SIGINT) stops everything cleanly, and running it again resumes the same log."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli.upstack import default_sigint

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-c", "from services.cli.main import run; run()"]

INVENTORY = "sn,cpu_milli,memory_mib,gpu,model\nnode-a,64000,262144,2,V100M32\nnode-b,32000,131072,1,T4\n"

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: demo
  namespace: team-a
  labels: {tensor-fusion.ai/enabled: "true"}
  annotations:
    tensor-fusion.ai/tflops-request: "10"
    tensor-fusion.ai/vram-request: 4Gi
    tensor-fusion.ai/tflops-limit: "20"
    tensor-fusion.ai/vram-limit: 4Gi
spec:
  containers: [{name: main, image: python:3.11}]
"""


class Stack:
    """A running ``gpuledger up``; output goes to ``log``."""

    def __init__(self, data_dir: Path, inventory: Path, log: Path) -> None:
        self.log = log
        self._out = log.open("ab")
        self.process = subprocess.Popen([*CLI, "up", "--data-dir", str(data_dir), "--inventory", str(inventory)],
                                        stdout=self._out, stderr=subprocess.STDOUT, preexec_fn=default_sigint)

    def wait_up(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while "gpuledger is up" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gpuledger up did not come up:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.1)

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(60)
        self._out.close()
        return code


def cli(*args: str) -> tuple[int, Any]:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        return done.returncode, done.stdout + done.stderr


def refuses(url: str) -> bool:
    host, port = url.split("//", 1)[1].split("@")[-1].split("/")[0].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return False
    except OSError:
        return True


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data dir outside pytest's 0700 temp root: PostgreSQL runs as another user when we are
    root, and a concurrent pytest session re-chmods /tmp/pytest-of-<user> (pg_ctl then cannot stop it)."""
    path = Path(tempfile.mkdtemp(prefix="gpuledger-up-"))
    try:
        yield path / "stack"
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_up_serves_submit_status_simulate_and_stops_on_ctrl_c(tmp_path: Path, data_dir: Path) -> None:
    inventory, pod = tmp_path / "nodes.csv", tmp_path / "pod.yaml"
    inventory.write_text(INVENTORY)
    pod.write_text(POD)
    stack = Stack(data_dir, inventory, tmp_path / "up.log")
    try:
        stack.wait_up()
        found = json.loads((data_dir / "endpoints.json").read_text())
        assert set(found) == {"nats_url", "database_url", "allocator_http", "writer_http", "webhook_https"}
        code, simulated = cli("simulate", str(pod), "--json", "--data-dir", str(data_dir))
        assert code == 0 and simulated["outcome"]["type"] == "allocation_granted"
        assert simulated["outcome"]["position"] is None and simulated["filters"]
        code, outcome = cli("submit", str(pod), "--json", "--data-dir", str(data_dir))
        assert code == 0, outcome
        assert outcome["type"] == "allocation_granted"
        assert outcome["node"] in {"node-a", "node-b"} and len(outcome["gpus"]) == 1
        assert outcome["request"] == {"tflops": "10", "vram": "4Gi"}
        code, status = cli("status", "--json", "--data-dir", str(data_dir))
        assert code == 0 and status["allocations"] == {"granted": 1, "queued": 0}
        assert sum(status["gpus_by_phase"].values()) == 3 and status["position"] >= outcome["position"]
        pod.write_text(POD.replace('tflops-request: "10"', "tflops-request: lots"))
        code, error = cli("submit", str(pod), "--json", "--data-dir", str(data_dir))
        assert code == 2 and error["field"] == "tensor-fusion.ai/tflops-request"
    finally:
        assert stack.interrupt() == 0, stack.log.read_text()[-4000:]
    assert "gpuledger stopped" in stack.log.read_text()
    assert refuses(found["nats_url"]) and refuses(found["database_url"])

    again = Stack(data_dir, inventory, tmp_path / "up2.log")
    try:
        again.wait_up()
        code, resumed = cli("status", "--json", "--data-dir", str(data_dir))
        assert code == 0 and resumed["allocations"]["granted"] == 1
        assert resumed["position"] >= status["position"]
    finally:
        assert again.interrupt() == 0


@pytest.mark.parametrize(("content", "field"), [
    ("nodes:\n  - name: n1\n    gpus: [H100_SXM]\n", "nodes[0].gpus[0].model"),
    ("nodes: 3\n", "nodes"),
    (b"\x7fELF\x02\x01\x01\x00\xff\xfe", "inventory"),
])
def test_a_bad_inventory_exits_2_naming_the_field_before_anything_starts(
        tmp_path: Path, content: str | bytes, field: str) -> None:
    inventory = tmp_path / "inv.yaml"
    if isinstance(content, bytes):
        inventory.write_bytes(content)
    else:
        inventory.write_text(content)
    data_dir = tmp_path / "d"
    done = subprocess.run([*CLI, "up", "--data-dir", str(data_dir), "--inventory", str(inventory)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"(field: inventory{' ' + field if field != 'inventory' else ''})" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (data_dir / "postgres").exists() and not (data_dir / "nats").exists()
