"""Deciding one fetched batch of intents, in stream order, against the live projection.

Owns the per-message rules of the allocator loop: an undecodable or invalid payload (any
exception while decoding) becomes an ``IntentRejected`` event (reason, field, value, subject, raw
payload <= 4 KiB) and is terminated; an intent id decided before (in an earlier transaction, or
earlier in this batch) gets no second decision; every other intent goes through
``domain.process``. An unexpected exception inside ``process`` raises :class:`IntentFailed`
naming the intent, so the loop can reject that intent alone (:func:`rejected_alone`) on a fresh
projection. Every id written to the log is bounded (:func:`log_key`) and every rejection is
sanitised and bounded, so that appending a rejection cannot fail on its contents. No I/O: the
caller appends the result in one transaction and acks only after the commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime

import msgspec
import structlog

from events import codec, intents
from events.decisions import AnyEvent, IntentRejected
from services.allocator.domain.state import ClusterState
from services.allocator.loop.failures import describe
from services.allocator.ports import ACK, TERM, Action, DecidedIntent, Delivery

log = structlog.get_logger(__name__)

RAW_LIMIT = 4096
"""At most this many bytes of a rejected payload are kept in ``IntentRejected.raw``."""
TEXT_LIMIT = 1024
"""At most this many characters of a rejection's reason, field, value, subject and type."""
KEY_LIMIT = 1024
"""Intent ids longer than this many UTF-8 bytes (or not storable text) are logged by digest."""

Process = Callable[[ClusterState, intents.AnyIntent, datetime], list[AnyEvent]]
"""``services.allocator.domain.process``: decide, evolve, grant what now fits."""
Evolve = Callable[[ClusterState, AnyEvent], ClusterState]


class BatchResult(msgspec.Struct, kw_only=True):
    """What a batch decided: ``decided`` to append (in order), ``actions[i]`` ack/term for delivery i."""

    decided: list[DecidedIntent]
    actions: list[Action]
    duplicates: int = 0
    rejected: int = 0


def _clean(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` as storable UTF-8 (lone surrogates and NUL replaced), cut to ``limit`` characters."""
    text = text[: limit * 2].encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def log_key(raw_id: str) -> str:
    """The id an intent is logged and de-duplicated under: ``raw_id`` itself when it is storable
    text of at most KEY_LIMIT bytes, else ``sha256:<hex>`` of it (stable, so a redelivery or a
    republish finds it again)."""
    try:
        encoded = raw_id.encode("utf-8")
    except UnicodeEncodeError:
        encoded = raw_id.encode("utf-8", "surrogatepass")
    else:
        if raw_id and len(encoded) <= KEY_LIMIT and "\x00" not in raw_id:
            return raw_id
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


def _field_of(reason: str, exc: BaseException | None) -> str:
    field = getattr(exc, "field", None)
    if isinstance(field, str) and field:
        return field
    if "`$." in reason:
        return reason.rsplit("`$.", 1)[1].rstrip("`")
    return ""


def rejected_event(delivery: Delivery, *, reason: str, now: datetime, intent_id: str = "",
                   error: BaseException | None = None) -> IntentRejected:
    """The IntentRejected for a payload that is not a valid intent, or an intent that could not be
    decided or stored. ``field``/``value`` come from ``error`` when it names them (the contract's
    bound errors do), else ``field`` is parsed from msgspec's ``at `$.spec.pool``` suffix;
    ``intent_type`` is the subject's last token. Every text is sanitised and bounded."""
    value = getattr(error, "value", "")
    return IntentRejected(
        at=now,
        intent_id=log_key(intent_id or delivery.msg_id or f"nats-seq-{delivery.stream_seq}"),
        reason=_clean(reason),
        intent_type=_clean(delivery.subject.rsplit(".", 1)[-1], 128),
        field=_clean(_field_of(reason, error), 256),
        value=_clean(value if isinstance(value, str) else repr(value), 256),
        subject=_clean(delivery.subject, 256),
        raw=_clean(delivery.data[:RAW_LIMIT].decode("utf-8", "replace"), RAW_LIMIT),
    )


def candidate_ids(deliveries: Sequence[Delivery]) -> list[str]:
    """Log keys to look up in the processed index: the msg id, and the decoded ``intent_id``."""
    ids: list[str] = []
    for delivery in deliveries:
        ids.append(log_key(delivery.msg_id or f"nats-seq-{delivery.stream_seq}"))
        try:
            intent = codec.decode_intent(delivery.data)
        except Exception:  # any undecodable payload is keyed on its msg id
            continue
        if log_key(intent.intent_id) != ids[-1]:
            ids.append(log_key(intent.intent_id))
    return ids


class IntentFailed(Exception):
    """``process`` raised an unexpected exception for the delivery at ``index`` of the batch; the
    projection may be half-changed, so the caller reloads it before rejecting that intent."""

    def __init__(self, index: int, cause: BaseException) -> None:
        super().__init__(f"deciding delivery {index} failed: {cause!r}")
        self.index = index
        self.cause = cause


def rejected_alone(state: ClusterState, delivery: Delivery, error: BaseException, *, now: datetime,
                   evolve: Evolve) -> DecidedIntent:
    """The rejection of one delivery whose decision or append failed with ``error`` (keyed on its
    intent id when it decodes, else its msg id); folded into ``state``."""
    try:
        intent_id = codec.decode_intent(delivery.data).intent_id
    except Exception:  # undecodable: keyed on its msg id
        intent_id = ""
    event = rejected_event(delivery, reason=f"intent could not be decided or stored: {describe(error)}",
                           now=now, intent_id=intent_id, error=error)
    evolve(state, event)
    return DecidedIntent(intent_id=event.intent_id, stream_seq=delivery.stream_seq, events=(event,))


class BatchDecider:
    """Decides the deliveries of one batch one at a time (so the loop can yield between them),
    into one :class:`BatchResult`; :func:`decide_batch` is the whole batch at once.

    ``state`` is mutated as intents are decided; ``processed`` ids are skipped (acked); ``now`` is
    the batch's decision time. :meth:`decide` raises :class:`IntentFailed` as decide_batch does.
    """

    def __init__(self, state: ClusterState, *, processed: set[str], now: datetime, process: Process,
                 evolve: Evolve) -> None:
        self._state = state
        self._seen = set(processed)
        self._now = now
        self._process = process
        self._evolve = evolve
        self.result = BatchResult(decided=[], actions=[])

    def decide(self, index: int, delivery: Delivery) -> None:
        """Decide ``delivery``, the ``index``-th of the batch, after every earlier one."""
        state, now, evolve, result = self._state, self._now, self._evolve, self.result
        intent: intents.AnyIntent | None = None
        error: Exception | None = None
        try:
            intent = codec.decode_intent(delivery.data)
        except Exception as exc:  # every way a payload can fail to decode is a rejection
            error = exc
        key = log_key(intent.intent_id if intent else delivery.msg_id or f"nats-seq-{delivery.stream_seq}")
        result.actions.append(ACK if intent else TERM)
        if key in self._seen:
            result.duplicates += 1
            return
        self._seen.add(key)
        if intent is None:
            reason = str(error)
            if error is not None and not isinstance(error, codec.DecodeError):
                reason = f"invalid intent: {describe(error)}"
            rejected = rejected_event(delivery, reason=reason, now=now, intent_id=key, error=error)
            evolve(state, rejected)
            events: list[AnyEvent] = [rejected]
            result.rejected += 1
        else:
            try:
                events = _decide_one(state, intent, delivery, now=now, process=self._process, evolve=evolve)
            except Exception as exc:  # a bug one intent triggers must not stop the others
                raise IntentFailed(index, exc) from exc
        result.decided.append(DecidedIntent(intent_id=key, stream_seq=delivery.stream_seq, events=tuple(events)))


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
    decider = BatchDecider(state, processed=processed, now=now, process=process, evolve=evolve)
    for index, delivery in enumerate(deliveries):
        decider.decide(index, delivery)
    return decider.result


def _decide_one(
    state: ClusterState,
    intent: intents.AnyIntent,
    delivery: Delivery,
    *,
    now: datetime,
    process: Process,
    evolve: Evolve,
) -> list[AnyEvent]:
    """``process`` one intent; a ValueError from the domain (bad input it caught before changing
    anything) becomes an IntentRejected so that the intent still gets exactly one outcome."""
    try:
        return process(state, intent, now)
    except ValueError as exc:
        log.warning("intent rejected by the domain", intent_id=intent.intent_id[:256], error=str(exc)[:512])
        event = rejected_event(delivery, reason=str(exc), now=now, intent_id=intent.intent_id, error=exc)
        evolve(state, event)
        return [event]
