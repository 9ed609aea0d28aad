"""The webhook of a real ``gpuledger up`` requires the stack's token (issue 28 item 4): an
AdmissionReview without credentials, the issue's 8-GPU pod in namespace ``victim-ns``, is answered
401 and nothing is allocated; with ``Authorization: Bearer <GPULEDGER_API_TOKEN>`` it is reviewed;
a squatting ``metadata.uid`` is denied naming the field; the token is never printed."""

from __future__ import annotations

import json
import secrets
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.integration.service.test_cli_up import INVENTORY, Stack, data_dir  # noqa: F401
from tests.unit.admission.builders import a_pod, a_review

pytestmark = pytest.mark.integration


def _review(namespace: str, *, uid: str, name: str) -> bytes:
    pod = a_pod({"tflops-request": "10", "vram-request": "4Gi", "gpupool": "default"}, uid=uid, name=name)
    pod["metadata"]["namespace"] = namespace
    return a_review(pod, uid=f"review-{name}", namespace=namespace)


def _post(url: str, body: bytes, context: ssl.SSLContext, *, token: str = "") -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"{url}/mutate-v1-pod", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            return answer.status, msgspec.json.decode(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, msgspec.json.decode(refused.read())


def test_up_webhook_refuses_reviews_without_the_token(tmp_path: Path, data_dir: Path,  # noqa: F811
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    token = secrets.token_urlsafe(32)
    monkeypatch.setenv("GPULEDGER_API_TOKEN", token)
    monkeypatch.setenv("GPULEDGER_ADMISSION_CERT_DIR", str(tmp_path / "webhook-tls"))
    inventory = tmp_path / "nodes.csv"
    inventory.write_text(INVENTORY)
    stack = Stack(data_dir, inventory, tmp_path / "up.log")
    try:
        stack.wait_up()
        url = json.loads((data_dir / "endpoints.json").read_text())["webhook_https"]
        assert url.startswith("https://127.0.0.1:"), url
        context = ssl.create_default_context(cafile=str(tmp_path / "webhook-tls" / "tls.crt"))
        stolen = _review("victim-ns", uid="", name="stolen")
        for sent in ("", "not-the-token"):
            status, answer = _post(url, stolen, context, token=sent)
            assert status == 401 and answer["field"] == "Authorization", answer
        found = json.loads((data_dir / "endpoints.json").read_text())
        listing = urllib.request.Request(f"{found['allocator_http']}/api/v1/allocations?namespace=victim-ns",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(listing, timeout=30) as answer:
            assert "stolen" not in answer.read().decode(), "the unauthenticated review was allocated"

        status, squat = _post(url, _review("team-a", uid="rt2-team-a/future", name="squat"), context, token=token)
        assert status == 200 and not squat["response"]["allowed"], squat
        assert squat["response"]["status"]["message"].startswith("metadata.uid='rt2-team-a/future'"), squat

        status, admitted = _post(url, _review("team-a", uid="", name="trainer"), context, token=token)
        assert status == 200 and admitted["response"]["allowed"], admitted
    finally:
        assert stack.interrupt() == 0, stack.log.read_text()[-4000:]
    assert token not in stack.log.read_text(), "the token was printed"
