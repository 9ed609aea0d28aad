"""With no stack answering, every command fails at once with exit 1 and a message naming the URL
and where it came from (no reconnect loop, no traceback); bad manifests are refused before any
connection (a Deployment, an unlabelled pod) with exit 2 naming the field."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from services.cli.main import run; run()"]

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: demo
  namespace: team-a
  labels: {labels}
  annotations: {{tensor-fusion.ai/tflops-request: "10", tensor-fusion.ai/vram-request: 4Gi}}
spec:
  containers: [{{name: main, image: python:3.11}}]
"""

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: team-a}
spec:
  replicas: 2
  template:
    metadata: {labels: {tensor-fusion.ai/enabled: "true"}}
    spec: {containers: [{name: main, image: python:3.11}]}
"""


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def down(tmp_path: Path) -> Path:
    """A data dir whose endpoints.json names ports nothing listens on."""
    port = _closed_port()
    (tmp_path / "endpoints.json").write_text(json.dumps({
        "nats_url": f"nats://gpuledger:secret@127.0.0.1:{port}", "database_url": f"postgresql://u:pw@127.0.0.1:{port}/g",
        "allocator_http": f"http://127.0.0.1:{port}", "webhook_https": ""}))
    (tmp_path / "pod.yaml").write_text(POD.format(labels='{tensor-fusion.ai/enabled: "true"}'))
    return tmp_path


def gpuledger(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False, cwd=cwd)


@pytest.mark.parametrize("command", [
    ["status"], ["submit", "{d}/pod.yaml"], ["submit", "{d}/pod.yaml", "--timeout", "5"], ["simulate", "{d}/pod.yaml"],
    ["release", "team-a/demo"], ["resize", "team-a/demo", "--tflops", "20"], ["queue"], ["why", "team-a/demo"],
    ["nodes"], ["nodes", "show", "n1"], ["pool", "list"], ["pool", "configure", "default", "--strategy", "fgd"],
    ["quota", "list"], ["quota", "set", "team-a", "--total-tflops", "10"], ["quota", "remove", "team-a"],
    ["events"], ["history"], ["replay"], ["trace", "replay", "--limit", "5"], ["recommend", "web"],
], ids=lambda c: " ".join(c))
def test_stack_down_fails_fast_naming_the_url(down: Path, command: list[str]) -> None:
    done = gpuledger(*[part.format(d=down) for part in command], "--data-dir", str(down))
    assert done.returncode == 1, done.stdout + done.stderr
    text = done.stdout + done.stderr
    assert "127.0.0.1" in text and "Traceback" not in text
    assert "secret" not in text and ":pw@" not in text  # passwords are not printed


def test_stack_down_json_error_shape(down: Path) -> None:
    done = gpuledger("status", "--json", "--data-dir", str(down))
    assert done.returncode == 1
    error = json.loads(done.stdout)
    assert "no gpuledger allocator answers at http://127.0.0.1:" in error["error"]
    assert str(down / "endpoints.json") in error["error"]


def test_no_stack_at_all_names_the_data_dir(tmp_path: Path) -> None:
    done = gpuledger("status", "--json", cwd=tmp_path)
    assert done.returncode == 1
    assert ".gpuledger/endpoints.json" in json.loads(done.stdout)["error"]


def test_a_deployment_is_refused_before_connecting(down: Path) -> None:
    (down / "deploy.yaml").write_text(DEPLOYMENT)
    done = gpuledger("submit", str(down / "deploy.yaml"), "--json", "--data-dir", str(down))
    assert done.returncode == 2
    error = json.loads(done.stdout)
    assert error["field"] == "kind" and "Deployment" in error["error"]


def test_an_unlabelled_pod_is_refused_unless_forced(down: Path) -> None:
    (down / "plain.yaml").write_text(POD.format(labels="{app: web}"))
    done = gpuledger("submit", str(down / "plain.yaml"), "--json", "--data-dir", str(down))
    assert done.returncode == 2
    assert json.loads(done.stdout)["field"] == "metadata.labels.tensor-fusion.ai/enabled"
    forced = gpuledger("submit", str(down / "plain.yaml"), "--force", "--json", "--data-dir", str(down))
    assert forced.returncode == 1 and "no gpuledger allocator answers" in json.loads(forced.stdout)["error"]


def test_a_misspelled_annotation_is_refused_and_an_unused_one_noted_before_connecting(down: Path) -> None:
    """Issue 28 item 8 in submit and simulate."""
    text = POD.format(labels='{tensor-fusion.ai/enabled: "true"}')
    (down / "typo.yaml").write_text(text.replace("tflops-request", "tflops-requst"))
    for verb in ("submit", "simulate"):
        done = gpuledger(verb, str(down / "typo.yaml"), "--json", "--data-dir", str(down))
        assert done.returncode == 2, done.stdout + done.stderr
        error = json.loads(done.stdout)
        assert error["field"] == "tensor-fusion.ai/tflops-requst"
        assert "did you mean tensor-fusion.ai/tflops-request?" in error["error"]
    (down / "priced.yaml").write_text(text.replace("vram-request: 4Gi}",
                                                   "vram-request: 4Gi, tensor-fusion.ai/hourly-pricing: \"2\"}"))
    done = gpuledger("simulate", str(down / "priced.yaml"), "--data-dir", str(down))
    assert done.returncode == 1  # no stack; the note came first
    assert "note: tensor-fusion.ai/hourly-pricing: a TensorFusion annotation" in done.stderr
