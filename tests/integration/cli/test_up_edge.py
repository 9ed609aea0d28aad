"""The HTTP edge of a real ``gpuledger up`` as a hostile local web page or user would meet it.

One stack, started as a user would (no token in the environment) but with its descriptors limited
to 1,024 (``RLIMIT_NOFILE`` set in the child): the API needs the generated token, a cross-site
POST and a foreign Host are refused even with the token, a malformed ``Authorization`` header never
puts the token in the log (and many of them add a few short lines, no traceback), and 1,100 stalled
connections (idle, half a request line, half a head, an authenticated stalled body) neither stop the
API and the webhook from answering nor flood the log.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import ssl
import stat
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from services.shared import http_edge
from tests.integration.cli.upstack import CLI, ENV, as_json, gpuledger

pytestmark = pytest.mark.integration

INVENTORY = "sn,cpu_milli,memory_mib,gpu,model\nnode-a,64000,262144,2,V100M32\nnode-b,32000,131072,1,T4\n"
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "web", "namespace": "team-a", "labels": {"tensor-fusion.ai/enabled": "true"},
                    "annotations": {"tensor-fusion.ai/tflops-request": "10", "tensor-fusion.ai/vram-request": "1Gi"}},
       "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
FD_LIMIT = 1024
STALLED = 1100


class Up:
    """``gpuledger up`` with RLIMIT_NOFILE = 1,024 and a 3 s header timeout; output in ``log``."""

    def __init__(self, root: Path) -> None:
        self.data_dir, self.log = root / "stack", root / "up.log"
        (root / "nodes.csv").write_text(INVENTORY)
        env = {k: v for k, v in ENV.items() if not k.startswith(("GPULEDGER_API_TOKEN", "GPULEDGER_HTTP_"))}
        env["GPULEDGER_HTTP_HEADER_TIMEOUT_S"] = "3"
        self._out = self.log.open("ab")
        self.process = subprocess.Popen(
            [*CLI, "up", "--data-dir", str(self.data_dir), "--inventory", str(root / "nodes.csv")], cwd=root, env=env,
            stdout=self._out, stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT)))
        deadline = time.monotonic() + 240
        while "gpuledger is up" not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"gpuledger up did not come up:\n{self.log.read_text()[-4000:]}")
            time.sleep(0.2)
        found = json.loads((self.data_dir / "endpoints.json").read_text())
        self.http, self.webhook = found["allocator_http"], found.get("webhook_https", "")
        self.port = int(urlsplit(self.http).port or 0)
        self.token_file = self.data_dir / "secrets" / "api-token"
        self.token = self.token_file.read_text().strip()

    def call(self, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None,
             token: bool = True) -> tuple[int, Any]:
        """One request; (status, decoded JSON or None)."""
        sent = {**({"Authorization": f"Bearer {self.token}"} if token else {}), **(headers or {})}
        request = urllib.request.Request(self.http + path, data=body, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stop(self) -> int:
        self.process.send_signal(2)
        code = self.process.wait(90)
        self._out.close()
        return code


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    root = Path(tempfile.mkdtemp(prefix="gpuledger-edge-"))
    running = Up(root)
    try:
        yield running
    finally:
        assert running.stop() == 0, running.log.read_text()[-4000:]
        shutil.rmtree(root, ignore_errors=True)


def test_up_generates_a_token_the_api_needs_and_the_cli_reads(up: Up) -> None:
    assert stat.S_IMODE(up.token_file.stat().st_mode) == 0o600 and len(up.token) >= 32
    output = up.log.read_text()
    assert f"API token: {up.token_file}" in output and up.token not in output
    status, body = up.call("GET", "/api/v1/status", token=False)
    assert status == 401 and body["field"] == "Authorization"
    done = gpuledger("status", "--json", "--data-dir", str(up.data_dir))
    assert done.returncode == 0 and sum(as_json(done)["gpus_by_phase"].values()) == 3, done.stderr


def test_a_cross_site_post_and_a_foreign_host_are_refused(up: Up) -> None:
    page = {"Content-Type": "text/plain", "Origin": "http://evil.example"}  # no CORS preflight for this
    status, _ = up.call("POST", "/api/v1/allocations", body=json.dumps(POD).encode(), headers=page, token=False)
    assert status in (401, 403)
    for headers, expected in ((page, 403), ({"Content-Type": "application/json", "Origin": "http://evil.example"}, 403),
                              ({"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403),
                              ({"Content-Type": "text/plain"}, 415)):
        status, body = up.call("POST", "/api/v1/allocations", body=json.dumps(POD).encode(), headers=headers)
        assert status == expected, (headers, body)
    rebound = {"Host": f"attacker.example:{up.port}"}
    assert up.call("GET", "/api/v1/allocations", headers=rebound)[0] == 421
    status, body = up.call("PUT", "/api/v1/quotas/team-a", body=b'{"total": {}}',
                           headers={**rebound, "Content-Type": "application/json"})
    assert status == 421 and body["field"] == "Host"
    status, body = up.call("GET", "/api/v1/allocations")
    assert status == 200 and body["items"] == []  # nothing was granted to the page


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_malformed_authorization_header_never_logs_the_token(up: Up) -> None:
    before = len(up.log.read_bytes())
    bad = (f"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {up.token}\x00\r\n\r\n").encode()
    for _ in range(200):
        answer = _raw(up.port, bad)
        assert answer.startswith(b"HTTP/1.") and b" 400 " in answer[:20], answer[:200]
    time.sleep(1)
    added = up.log.read_bytes()[before:].decode(errors="replace")
    assert up.token not in added and up.token not in up.log.read_text(errors="replace")
    assert "Traceback" not in added
    assert added.count("request refused before routing") <= http_edge.LOG_BURST + 1, added[-2000:]


def _stalled(port: int, kind: int, token: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setblocking(False)
    heads = [b"", b"GET /api/v1/sta", b"GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
             (f"POST /api/v1/simulate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
              f"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{").encode()]
    if heads[kind % 4]:
        sock.send(heads[kind % 4])
    return sock


def _webhook_answers(url: str) -> bool:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with urllib.request.urlopen(url + "/healthz", timeout=30, context=context) as response:
        return bool(response.status == 200)


def test_stalled_connections_under_1024_descriptors_neither_stop_the_api_nor_flood_the_log(up: Up) -> None:
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > STALLED + 100, "the test itself needs the descriptors"
    before = len(up.log.read_bytes())
    held: list[socket.socket] = []
    try:
        for kind in range(STALLED):
            held.append(_stalled(up.port, kind, up.token))
        status, body = up.call("GET", "/api/v1/status")  # while all 1,100 are held
        assert status == 200 and sum(body["gpus_by_phase"].values()) == 3
        if up.webhook:
            assert _webhook_answers(up.webhook)
        done = gpuledger("status", "--json", "--data-dir", str(up.data_dir))
        assert done.returncode == 0, done.stdout + done.stderr
        open_now = len(os.listdir(f"/proc/{up.process.pid}/fd"))
        assert open_now < FD_LIMIT - 64, open_now  # the cap keeps descriptors free for everything else
    finally:
        for sock in held:
            sock.close()
    time.sleep(4)  # past the header timeout: what is left of the stalls is closed
    assert up.call("GET", "/api/v1/status")[0] == 200
    added = up.log.read_bytes()[before:]
    lines = added.count(b"\n")
    print(f"{STALLED} stalled connections: the log grew by {len(added)} bytes, {lines} lines")
    assert len(added) < 64 * 1024, added[-3000:]
    assert b"Too many open files" not in added and b"Traceback" not in added, added[-3000:]


def test_stalled_tls_handshakes_on_the_webhook_are_capped_too(up: Up) -> None:
    if not up.webhook:
        pytest.skip("the admission webhook is not installed in this environment")
    port = int(urlsplit(up.webhook).port or 0)
    before = len(up.log.read_bytes())
    held: list[socket.socket] = []
    try:
        for index in range(STALLED):  # TCP connections that never send a TLS ClientHello (or half of one)
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if index % 2:
                sock.send(b"\x16\x03\x01\x02\x00\x01")
            held.append(sock)
        assert _webhook_answers(up.webhook)
        assert up.call("GET", "/api/v1/status")[0] == 200
        open_now = len(os.listdir(f"/proc/{up.process.pid}/fd"))
        assert open_now < FD_LIMIT - 64, open_now
    finally:
        for sock in held:
            sock.close()
    added = up.log.read_bytes()[before:]
    assert len(added) < 64 * 1024 and b"Too many open files" not in added and b"Traceback" not in added, added[-3000:]
