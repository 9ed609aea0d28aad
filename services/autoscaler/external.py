"""The external recommender: an HTTP service that proposes resources (TensorFusion ``externalScaler``).

TensorFusion internal/autoscaler/recommender/external_recommender.go: ``POST url`` with ``{"workloadName", "namespace",
"currentResources"}`` (10 s timeout, ``Authorization: Bearer <key>`` when ``apiKeySecretRef`` is
set); the answer ``{"needScaleUp", "needScaleDown", "reason", "recommendedResources"}`` becomes an
outcome: neither flag -> NoScalingNeeded (a no-op), an all-zero proposal -> nothing, otherwise the
proposal after the headroom cap. A non-200 answer or a body that does not decode is an error, which
abandons the round. Kubernetes Secrets are read from a mounted directory:
``<secrets_dir>/<secret name>/{apiKey,token,key}`` (the first that exists).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from events import guard
from events.bounds import BoundsError
from events.quantity import format_bytes, format_milli
from services.autoscaler.config import ExternalScaler, ResourcesSpec
from services.autoscaler.cron import CronError, to_request_limit
from services.autoscaler.recommendation import Outcome, RequestLimit, scales_up
from services.autoscaler.recommender import Processor

TIMEOUT_S = 10.0
SECRET_KEYS = ("apiKey", "token", "key")


MAX_ANSWER_BYTES = 64 * 1024
"""Largest external scaler answer read (a real one is a few hundred bytes)."""


class ExternalError(RuntimeError):
    """The external scaler failed (HTTP status, transport, or an answer that does not decode)."""


class ExternalAnswer(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The external scaler's response body."""

    need_scale_up: bool = False
    need_scale_down: bool = False
    reason: str = ""
    recommended_resources: ResourcesSpec = ResourcesSpec()


def to_spec(rl: RequestLimit) -> dict[str, Any]:
    """A request/limit as a TensorFusion ``Resources`` JSON object (canonical quantity strings)."""
    return {part: {"tflops": format_milli(res.milli_tflops), "vram": format_bytes(res.vram_bytes)}
            for part, res in (("requests", rl.request), ("limits", rl.limit))}


def api_key(scaler: ExternalScaler, secrets_dir: Path | None) -> str:
    """The bearer token from the mounted secret, or "" when no secret is referenced or mounted."""
    name = scaler.api_key_secret_ref.get("name", "") if scaler.api_key_secret_ref else ""
    if not name or secrets_dir is None:
        return ""
    for field in SECRET_KEYS:
        path = secrets_dir / name / field
        if path.is_file():
            return path.read_text().strip()
    return ""


async def ask(session: aiohttp.ClientSession, scaler: ExternalScaler, *, workload: str, namespace: str,
              current: RequestLimit, secrets_dir: Path | None = None) -> ExternalAnswer:
    """POST the request and decode the answer; raises ExternalError."""
    headers = {"Content-Type": "application/json"}
    token = api_key(scaler, secrets_dir)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {"workloadName": workload, "namespace": namespace, "currentResources": to_spec(current)}
    try:
        async with session.post(scaler.url, json=body, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as resp:
            data = await resp.content.read(MAX_ANSWER_BYTES + 1)  # bounded: one byte over is refused
            if resp.status != 200:
                raise ExternalError(f"external scaler {scaler.url} answered {resp.status}: {data[:200]!r}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ExternalError(f"external scaler {scaler.url} failed: {exc!r}") from exc
    try:
        raw = guard.check_payload(data, limit=MAX_ANSWER_BYTES)
        return msgspec.json.decode(raw, type=ExternalAnswer)
    except (msgspec.DecodeError, BoundsError) as exc:  # BoundsError: size, UTF-8, nesting
        raise ExternalError(f"external scaler {scaler.url}: bad answer: {exc}") from exc


def outcome(answer: ExternalAnswer, *, current: RequestLimit, processor: Processor | None) -> Outcome | None:
    """The external recommender's result (TensorFusion external_recommender.go); ExternalError for bad quantities."""
    if not answer.need_scale_up and not answer.need_scale_down:
        return Outcome(resources=RequestLimit(), has_applied=True, reason="NoScalingNeeded",
                       message=answer.reason or "external scaler: no scaling needed")
    try:
        rec = to_request_limit(answer.recommended_resources, rule="external")
    except CronError as exc:
        raise ExternalError(str(exc)) from exc
    if rec.is_zero():
        return None
    note = ""
    if processor is not None and scales_up(rec, current):
        rec, note = processor(rec)
    message = "; ".join(m for m in (answer.reason, note) if m)
    return Outcome(resources=rec, has_applied=rec == current, reason=answer.reason or "Updated", message=message)
