"""Hostile AdmissionReviews over verified HTTPS: always HTTP 200 and a denial naming the field.

Each body is posted to the running webhook publishing to real NATS; none publishes an intent, and
an ordinary pod posted after them is admitted and published (issue 13: "8Ei is admitted and the
next ordinary pod is never decided").
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from events import codec, intents, subjects
from services.podspec import keys
from tests.unit.admission.builders import a_pod, a_review

pytestmark = pytest.mark.integration

RES = {"tflops-request": "1", "vram-request": "1Gi"}


def _nested_review(depth: int) -> bytes:
    body = a_review(a_pod(RES))
    return body[:-1] + b',"extra":' + b"[" * depth + b"]" * depth + b"}"


def _latin1_review() -> bytes:
    return a_review(a_pod({**RES, "gpupool": "XXX"})).replace(b"XXX", "été".encode("latin-1"))


HOSTILE: list[tuple[str, bytes, str, str]] = [
    ("vram-8Ei", a_review(a_pod({"tflops-request": "1", "vram-request": "8Ei"})), keys.VRAM_REQUEST, "4Ti"),
    ("tflops-1e999999999", a_review(a_pod({"tflops-request": "1e999999999"})), keys.TFLOPS_REQUEST, "exponent"),
    ("indices-5000-digits", a_review(a_pod({**RES, "gpu-indices": "9" * 5000})), keys.GPU_INDICES, "not valid"),
    ("gpu-count-two", a_review(a_pod({**RES, "gpu-count": "two"})), keys.GPU_COUNT, "not a whole number"),
    ("gpu-count-5000-digits", a_review(a_pod({**RES, "gpu-count": "9" * 5000})), keys.GPU_COUNT, "must be in [1, 128]"),
    ("uid-600", a_review(a_pod(RES, uid="u" * 600)), "metadata.uid", "512"),
    ("uid-510", a_review(a_pod(RES, uid="u" * 510)), "intent_id", "512"),
    ("name-300", a_review(a_pod(RES, name="n" * 300)), "metadata.name", "253"),
    ("pool-300", a_review(a_pod({**RES, "gpupool": "p" * 300})), keys.POOL, "253"),
    ("nested-100000", _nested_review(100_000), "", "nested"),
    ("latin1", _latin1_review(), "", "invalid UTF-8 at byte"),
    ("huge-number", a_review(a_pod(RES)).replace(b'"dryRun":false', b'"dryRun":1e999999'), "", "out of range"),
    ("huge-integer", a_review(a_pod(RES)).replace(b'"dryRun":false', b'"dryRun":' + b"9" * 5000), "", "range"),
]


async def _published(js: Any) -> list[intents.AnyIntent]:
    info = await js.stream_info(subjects.INTENT_STREAM)
    return [codec.decode_intent((await js.get_msg(subjects.INTENT_STREAM, seq)).data)
            for seq in range(1, info.state.last_seq + 1)]


async def test_hostile_reviews_are_denied_naming_the_field_and_the_next_pod_is_admitted(
        start_webhook, nats_publish, jetstream) -> None:
    webhook = await start_webhook(nats_publish)
    for name, body, field, text in HOSTILE:
        response = (await webhook.post(body))["response"]
        assert response["allowed"] is False, name
        status = response["status"]
        assert 400 <= status["code"] < 500, name
        assert text in status["message"] and (not field or field in status["message"]), (name, status["message"])
        assert "strconv" not in status["message"] and "Traceback" not in status["message"]
        assert len(status["message"]) < 2048, name
    assert await _published(jetstream) == []
    ordinary = (await webhook.post(a_review(a_pod(RES, uid="ordinary"), uid="r-ordinary")))["response"]
    assert ordinary["allowed"] is True
    published = await _published(jetstream)
    assert [i.intent_id for i in published] == ["admit-ordinary"]


async def test_an_error_inside_review_is_a_denial_not_a_500(start_webhook, nats_publish, monkeypatch) -> None:
    from services.admission import webhook as module

    def broken(body: bytes, **_: Any) -> Any:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(module, "review", broken)
    webhook = await start_webhook(nats_publish)
    response = (await webhook.post(a_review(a_pod(RES))))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "ZeroDivisionError" in response["status"]["message"]


def test_the_hostile_bodies_are_what_they_claim() -> None:
    for name, body, _, _ in HOSTILE:
        if name not in ("latin1", "huge-number", "huge-integer", "nested-100000"):
            assert msgspec.json.decode(body)["request"]["object"]["metadata"]
