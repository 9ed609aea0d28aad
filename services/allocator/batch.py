"""Deciding one fetched batch of intents, in stream order, against the live projection.

Owns the per-message rules of the allocator loop (issue 4): an undecodable or invalid payload
becomes an ``IntentRejected`` event (reason, subject, raw payload <= 4 KiB) and is terminated;
an intent id decided before (in an earlier transaction, or earlier in this batch) gets no second
decision; every other intent goes through ``domain.process``. No I/O: the caller appends the
result in one transaction and acks only after the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import msgspec
import structlog

from events import codec, intents
from events.decisions import AnyEvent, IntentRejected
from services.allocator.domain.state import ClusterState
from services.allocator.ports import DecidedIntent

log = structlog.get_logger(__name__)

RAW_LIMIT = 4096
"""At most this many bytes of a rejected payload are kept in ``IntentRejected.raw``."""

ACK = "ack"
TERM = "term"

Process = Callable[[ClusterState, intents.AnyIntent, datetime], list[AnyEvent]]
"""``services.allocator.domain.process``: decide, evolve, grant what now fits."""
Evolve = Callable[[ClusterState, AnyEvent], ClusterState]


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """One message as JetStream delivered it: stream sequence, subject, payload, ``Nats-Msg-Id``."""

    stream_seq: int
    subject: str
    data: bytes
    msg_id: str = ""


class BatchResult(msgspec.Struct, kw_only=True):
    """What a batch decided: ``decided`` to append (in order), ``actions[i]`` ack/term for delivery i."""

    decided: list[DecidedIntent]
    actions: list[str]
    duplicates: int = 0
    rejected: int = 0


def rejected_event(delivery: Delivery, *, reason: str, now: datetime, intent_id: str = "") -> IntentRejected:
    """The IntentRejected for a payload that is not a valid intent (``field`` parsed from msgspec's
    ``at `$.spec.pool``` suffix when present; ``intent_type`` from the subject's last token)."""
    field = ""
    if "`$." in reason:
        field = reason.rsplit("`$.", 1)[1].rstrip("`")
    return IntentRejected(
        at=now,
        intent_id=intent_id or delivery.msg_id or f"nats-seq-{delivery.stream_seq}",
        reason=reason,
        intent_type=delivery.subject.rsplit(".", 1)[-1],
        field=field,
        subject=delivery.subject,
        raw=delivery.data[:RAW_LIMIT].decode("utf-8", "replace").replace("\x00", "\ufffd"),
    )


def candidate_ids(deliveries: Sequence[Delivery]) -> list[str]:
    """Intent ids to look up in the processed index: the msg id, or the decoded ``intent_id``."""
    ids: list[str] = []
    for delivery in deliveries:
        ids.append(delivery.msg_id or f"nats-seq-{delivery.stream_seq}")
        try:
            intent = codec.decode_intent(delivery.data)
        except codec.DecodeError:
            continue
        if intent.intent_id != ids[-1]:
            ids.append(intent.intent_id)
    return ids


def _decode(data: bytes) -> intents.AnyIntent:
    """decode_intent, also refusing NUL characters (PostgreSQL JSONB cannot store ``\\u0000``, so
    such an intent would fail every append and block the stream)."""
    if b"\\u0000" in data:
        raise codec.DecodeError("invalid intent: strings must not contain NUL (\\u0000) characters")
    return codec.decode_intent(data)


def decide_batch(
    state: ClusterState,
    deliveries: Sequence[Delivery],
    *,
    processed: set[str],
    now: datetime,
    process: Process,
    evolve: Evolve,
) -> BatchResult:
    """Decide ``deliveries`` in order, advancing ``state``; ``processed`` ids are skipped (acked).

    ``state`` is mutated: if the append of the result fails, the caller must reload it.
    """
    seen = set(processed)
    result = BatchResult(decided=[], actions=[])
    for delivery in deliveries:
        intent: intents.AnyIntent | None = None
        try:
            intent = _decode(delivery.data)
        except codec.DecodeError as exc:
            problem = str(exc)
        key = intent.intent_id if intent else delivery.msg_id or f"nats-seq-{delivery.stream_seq}"
        result.actions.append(ACK if intent else TERM)
        if key in seen:
            result.duplicates += 1
            continue
        seen.add(key)
        if intent is None:
            rejected = rejected_event(delivery, reason=problem, now=now, intent_id=key)
            evolve(state, rejected)
            events: list[AnyEvent] = [rejected]
            result.rejected += 1
        else:
            events = _decide_one(state, intent, delivery, now=now, process=process, evolve=evolve)
        result.decided.append(DecidedIntent(intent_id=key, stream_seq=delivery.stream_seq, events=tuple(events)))
    return result


def _decide_one(
    state: ClusterState,
    intent: intents.AnyIntent,
    delivery: Delivery,
    *,
    now: datetime,
    process: Process,
    evolve: Evolve,
) -> list[AnyEvent]:
    """``process`` one intent; a ValueError from the domain (bad input it caught late) becomes an
    IntentRejected so that the intent still gets exactly one outcome."""
    try:
        return process(state, intent, now)
    except ValueError as exc:
        log.warning("intent rejected by the domain", intent_id=intent.intent_id, error=str(exc))
        event = rejected_event(delivery, reason=str(exc), now=now, intent_id=intent.intent_id)
        evolve(state, event)
        return [event]
