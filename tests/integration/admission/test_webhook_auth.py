"""The webhook's credentials and allocation ids, with real AdmissionReview JSON over verified HTTPS
against the running webhook on real NATS (issue 28 item 4): a review without the bearer token is
refused with 401 and publishes nothing; a UID that would name another namespace's pod
(``metadata.uid: "team-b/future"``, the ``namespace/name`` id of a pod of team-b) is denied
naming the field, and nothing is published for it; with a client CA, only a certificate it signed
gets through the TLS handshake."""

from __future__ import annotations

import secrets
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web
from nats.js import JetStreamContext

from events import subjects
from services.admission import tls
from services.admission.view import ClusterView
from services.admission.webhook import build_app
from services.podspec import PoolDefaults
from tests.unit.admission.builders import a_pod, a_review

pytestmark = pytest.mark.integration

GPU_POD = {"tflops-request": "10", "vram-request": "4Gi", "gpu-count": "8", "gpupool": "mock"}


def _pod(namespace: str, *, uid: str) -> dict[str, Any]:
    pod = a_pod(GPU_POD, uid=uid)
    pod["metadata"]["namespace"] = namespace
    return pod


async def _published(js: JetStreamContext) -> int:
    return int((await js.stream_info(subjects.INTENT_STREAM)).state.messages)


async def test_a_review_without_the_token_is_refused_and_publishes_nothing(
        start_webhook, nats_publish, jetstream) -> None:
    token = secrets.token_urlsafe(32)
    webhook = await start_webhook(nats_publish, token=token)
    body = a_review(_pod("victim-ns", uid=""), uid="review-1", namespace="victim-ns")
    for sent in ("", "wrong", token[:-1], f"{token}x"):
        status, answer = await webhook.send(body, token=sent)
        assert status == 401 and answer["field"] == "Authorization", (sent, status, answer)
        assert token not in str(answer)
    async with webhook.session.post(f"{webhook.url}/mutate-v1-pod", data=body,
                                    headers={"Authorization": f"Basic {token}"}) as basic:
        assert basic.status == 401
    assert await _published(jetstream) == 0
    status, answer = await webhook.send(body, token=token)
    assert status == 200 and answer["response"]["allowed"], answer
    assert await _published(jetstream) == 1


@pytest.mark.parametrize("where", ["metadata.uid", "request.uid"])
async def test_a_uid_naming_another_namespace_is_denied_naming_the_field(
        start_webhook, nats_publish, jetstream, where: str) -> None:
    webhook = await start_webhook(nats_publish, token="t0ken")
    squat = "team-b/future"  # the allocation id pod team-b/future gets when it has no UID
    pod = _pod("team-a", uid=squat if where == "metadata.uid" else "")
    body = a_review(pod, uid=squat if where == "request.uid" else "review-2", namespace="team-a")
    answer = (await webhook.post(body))["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 400, answer
    assert answer["status"]["message"].startswith(f"{where}='team-b/future'"), answer
    assert await _published(jetstream) == 0


async def test_with_a_client_ca_only_a_certificate_it_signed_gets_a_review_through(
        tmp_path: Path, tls_ca: trustme.CA, nats_publish, jetstream) -> None:
    """GPULEDGER_ADMISSION_CLIENT_CA_FILE: the TLS handshake needs a client certificate that CA
    signed (the API server's, from its AdmissionConfiguration kubeconfig)."""
    served, apiserver_ca, stranger_ca = tls_ca.issue_cert("127.0.0.1"), trustme.CA(), trustme.CA()
    served.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    served.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    apiserver_ca.cert_pem.write_to_path(str(tmp_path / "client-ca.crt"))
    context = tls.server_context(tmp_path / "tls.crt", key_file=tmp_path / "tls.key",
                                 client_ca=tmp_path / "client-ca.crt")
    runner = web.AppRunner(build_app(view=ClusterView(pool=PoolDefaults(name="mock")), publish=nats_publish))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    url = f"https://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/mutate-v1-pod"  # type: ignore[union-attr]
    body = a_review(_pod("team-a", uid=""), uid="review-3", namespace="team-a")

    async def post(client_ca: trustme.CA | None) -> int:
        client = ssl.create_default_context()
        tls_ca.configure_trust(client)
        if client_ca is not None:
            client_ca.issue_cert("kube-apiserver").configure_cert(client)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client)) as session, \
                session.post(url, data=body, headers={"Content-Type": "application/json"}) as answer:
            return answer.status

    try:
        for refused in (None, stranger_ca):
            with pytest.raises(aiohttp.ClientError):
                await post(refused)
        assert await _published(jetstream) == 0
        assert await post(apiserver_ca) == 200
        assert await _published(jetstream) == 1
    finally:
        await runner.cleanup()
