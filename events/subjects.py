"""NATS names: streams, subject templates, durable consumers. The only place these strings live."""

from __future__ import annotations

INTENT_STREAM = "GPULEDGER_INTENTS"
EVENT_STREAM = "GPULEDGER_EVENTS"
INTENT_SUBJECT_PREFIX = "gpuledger.intent"
EVENT_SUBJECT_PREFIX = "gpuledger.event"
METRICS_SUBJECT_PREFIX = "gpuledger.metrics"
AUTOSCALER_RECOMMEND_SUBJECT = "gpuledger.autoscaler.recommend"
"""Request/reply subject of the running autoscaler (``gpuledger recommend WORKLOAD``)."""
ALLOCATOR_DURABLE = "allocator"


def intent_subject(tag: str) -> str:
    """``gpuledger.intent.<tag>`` for an intent tag such as ``request_allocation``."""
    return f"{INTENT_SUBJECT_PREFIX}.{tag}"


def event_subject(tag: str) -> str:
    """``gpuledger.event.<tag>`` for an event tag such as ``allocation_granted``."""
    return f"{EVENT_SUBJECT_PREFIX}.{tag}"


def metrics_subject(node: str) -> str:
    """``gpuledger.metrics.<node>``: usage samples pushed by the agent on ``node``."""
    return f"{METRICS_SUBJECT_PREFIX}.{node}"
