"""Where usage samples come from: NATS ``gpuledger.metrics.<node>`` and the Prometheus HTTP API.

NATS: node agents publish one JSON :class:`events.metrics.UsageSample` per message; a payload
that does not decode (negative, NaN, missing field, bad JSON) is counted under ``invalid`` and
dropped with a log line. Prometheus: two instant queries (``/api/v1/query``) of DCGM exporter
metrics per (namespace, pod): a compute fraction (0..1, converted with the pod's GPU TFLOPS
capacity) and VRAM bytes; NaN, negative, out-of-range (a timestamp past 2262, a value beyond one
GPU's bounds: counted under ``invalid`` by the engine) and unknown pods are counted and dropped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog

from events.metrics import SampleError, UsageSample, decode_sample
from services.autoscaler.engine import Engine
from services.autoscaler.view import Worker

log = structlog.get_logger("gpuledger.autoscaler")


def take_message(engine: Engine, data: bytes, *, subject: str = "") -> str | None:
    """Decode and ingest one NATS message; returns the drop reason (counted) or None."""
    try:
        sample = decode_sample(data)
    except SampleError as exc:
        engine.dropped["invalid"] += 1
        log.warning("usage sample dropped", reason="invalid", subject=subject, error=str(exc))
        return "invalid"
    return engine.ingest(sample)


class PrometheusError(RuntimeError):
    """Prometheus answered with an error status or a body that is not a query result."""


async def query(session: aiohttp.ClientSession, url: str, promql: str, *, timeout_s: float = 15.0) -> list[Any]:
    """Run an instant query; returns ``data.result`` (a vector). Raises PrometheusError."""
    async with session.get(f"{url.rstrip('/')}/api/v1/query", params={"query": promql},
                           timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        body = await resp.json(content_type=None)
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else body
        raise PrometheusError(f"prometheus query failed ({resp.status}): {error}")
    data = body.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"prometheus query returned {data.get('resultType')!r}, want a vector")
    result: list[Any] = data.get("result") or []
    return result


def _by_pod(vector: list[Any]) -> dict[tuple[str, str], tuple[float, float]]:
    """(namespace, pod) -> (timestamp s, value) from a Prometheus vector; unparsable values become NaN."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    for item in vector:
        labels: Mapping[str, str] = item.get("metric") or {}
        try:
            stamp, raw = item["value"]
            value = float(raw)
        except (KeyError, TypeError, ValueError):
            stamp, value = 0.0, math.nan
        out[(labels.get("namespace", ""), labels.get("pod", ""))] = (float(stamp), value)
    return out


def _worker_by_pod(engine: Engine) -> dict[tuple[str, str], Worker]:
    return {(w.spec.namespace, w.spec.pod): w for w in engine.view.workers.values()}


def to_samples(engine: Engine, tflops: list[Any], vram: list[Any]) -> list[UsageSample]:
    """Join the two vectors per pod into samples; bad values and unknown pods are counted and dropped."""
    workers, compute, memory = _worker_by_pod(engine), _by_pod(tflops), _by_pod(vram)
    samples = []
    for pod_key in sorted(set(compute) | set(memory)):
        stamp, fraction = compute.get(pod_key, (0.0, 0.0))
        stamp2, used = memory.get(pod_key, (stamp, 0.0))
        reason = _bad(fraction, used, pod_key in workers)
        if reason:
            engine.dropped[reason] += 1
            log.warning("prometheus sample dropped", reason=reason, namespace=pod_key[0], pod=pod_key[1])
            continue
        worker = workers[pod_key]
        capacity = _capacity(engine, worker)
        try:
            at = datetime.fromtimestamp(max(stamp, stamp2), tz=UTC)
            used_tflops, used_vram = int(fraction * capacity), int(used)
        except (OverflowError, OSError, ValueError):  # a timestamp or value no datetime/int can hold
            engine.dropped["invalid"] += 1
            log.warning("prometheus sample dropped", reason="invalid", namespace=pod_key[0], pod=pod_key[1],
                        stamp=max(stamp, stamp2), value=fraction, used=used)
            continue
        samples.append(UsageSample(
            workload=worker.spec.workload or worker.spec.pod, namespace=worker.spec.namespace, pod=worker.spec.pod,
            allocation_id=worker.spec.allocation_id, node=worker.node, gpu=worker.gpus[0] if worker.gpus else "",
            milli_tflops_used=used_tflops, vram_bytes_used=used_vram, at=at))
    return samples


def _capacity(engine: Engine, worker: Worker) -> int:
    """The worker's first GPU's TFLOPS capacity (milli-TFLOPS; 0 when unknown)."""
    cap = engine.view.capacity.get(worker.gpus[0]) if worker.gpus else None
    return cap.milli_tflops if cap is not None else 0


def _bad(fraction: float, used: float, known: bool) -> str:
    if math.isnan(fraction) or math.isnan(used) or math.isinf(fraction) or math.isinf(used):
        return "nan"
    if fraction < 0 or used < 0:
        return "negative"
    return "" if known else "unknown_workload"


async def poll_prometheus(engine: Engine, session: aiohttp.ClientSession, *, url: str, tflops_query: str,
                          vram_query: str) -> int:
    """One poll: query both metrics and ingest the samples; returns how many were taken."""
    tflops = await query(session, url, tflops_query)
    vram = await query(session, url, vram_query)
    return sum(1 for sample in to_samples(engine, tflops, vram) if engine.ingest(sample) is None)
