"""Histogram checkpoints in a NATS JetStream key-value bucket, so a restart keeps the history.

One key per workload, ``w.<base64url("namespace/workload")>``; the value is msgpack of
:class:`WorkloadCheckpoint` (lossless histograms, worker samplers, the in-memory recommendation
and active cron rule). A value that does not decode is logged and skipped, never fatal.
"""

from __future__ import annotations

import base64

import msgspec
import structlog
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, NoKeysError
from nats.js.kv import KeyValue

from services.autoscaler.aggregator import AggregatorCheckpoint, WorkloadAggregator
from services.autoscaler.engine import Engine, WorkloadState
from services.autoscaler.view import WorkloadKey

log = structlog.get_logger("gpuledger.autoscaler")


class WorkloadCheckpoint(msgspec.Struct, kw_only=True):
    """Everything the autoscaler keeps for one workload."""

    namespace: str
    workload: str
    aggregator: AggregatorCheckpoint | None
    state: WorkloadState


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(WorkloadCheckpoint)


def key_of(key: WorkloadKey) -> str:
    """The KV key of a workload (KV keys allow only ``[-/_=.a-zA-Z0-9]``)."""
    raw = f"{key[0]}/{key[1]}".encode()
    return "w." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def encode(key: WorkloadKey, agg: WorkloadAggregator | None, state: WorkloadState) -> bytes:
    """Bytes stored for one workload (a cron-only workload has no histograms yet)."""
    return _encoder.encode(WorkloadCheckpoint(namespace=key[0], workload=key[1],
                                              aggregator=agg.checkpoint() if agg else None, state=state))


def decode(data: bytes) -> WorkloadCheckpoint:
    """Decode a stored checkpoint; raises msgspec.DecodeError/ValidationError when corrupt."""
    return _decoder.decode(data)


async def open_bucket(js: JetStreamContext, bucket: str) -> KeyValue:
    """The checkpoint bucket, created (history 1, file storage) when missing."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=bucket, history=1)


async def save(kv: KeyValue, engine: Engine, keys: list[WorkloadKey]) -> int:
    """Store the given workloads' checkpoints; returns how many were written."""
    written = 0
    for key in keys:
        agg, state = engine.aggregators.get(key), engine.states.get(key)
        if agg is None and state is None:
            continue
        await kv.put(key_of(key), encode(key, agg, state or WorkloadState()))
        written += 1
    return written


async def load(kv: KeyValue, engine: Engine) -> int:
    """Restore every stored workload into ``engine``; returns how many were loaded."""
    try:
        names = await kv.keys()
    except NoKeysError:
        return 0
    loaded = 0
    for name in names:
        entry = await kv.get(name)
        if not entry.value:
            continue
        try:
            saved = decode(entry.value)
            agg = WorkloadAggregator.restore(saved.aggregator) if saved.aggregator else None
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            log.warning("checkpoint skipped", key=name, error=str(exc))
            continue
        key = (saved.namespace, saved.workload)
        if agg is not None:
            engine.aggregators[key] = agg
        engine.states[key] = saved.state
        loaded += 1
    return loaded
