"""Encoding and typed decoding of intents and events (JSON), decoders built once at import.

``decode_intent`` raises :class:`DecodeError` with a message naming the problem; the allocator
turns that into an ``IntentRejected`` event. ``decode_event`` upcasts payloads from older
schema versions and raises :class:`DecodeError` for anything it cannot read (never skips).
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import decisions, intents, upcasters
from events.base import SCHEMA_VERSION, Event, Intent

_encoder = msgspec.json.Encoder()
_intent_decoder = msgspec.json.Decoder(intents.AnyIntent)
_event_decoder = msgspec.json.Decoder(decisions.AnyEvent)


class DecodeError(ValueError):
    """A payload is not a valid message of the contract; ``str()`` says why."""


def encode(message: Intent | Event | msgspec.Struct) -> bytes:
    """Encode any message Struct to JSON bytes (the wire and JSONB format)."""
    return _encoder.encode(message)


def to_builtins(message: msgspec.Struct) -> dict[str, Any]:
    """The message as a JSON-ready dict (as stored in the ``events.data`` JSONB column)."""
    result: dict[str, Any] = msgspec.to_builtins(message)
    return result


def tag_of(message_type: type[msgspec.Struct] | msgspec.Struct) -> str:
    """The explicit snake_case tag of a message class or instance."""
    tag = message_type.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{message_type!r} has no string tag")
    return tag


def decode_intent(data: bytes | str) -> intents.AnyIntent:
    """Decode one intent; raises DecodeError naming the offending field or tag."""
    try:
        intent: intents.AnyIntent = _intent_decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"invalid intent: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed intent payload: {exc}") from exc
    return intent


def decode_event(data: bytes | str) -> decisions.AnyEvent:
    """Decode one stored or published event, upcasting older schema versions."""
    try:
        event: decisions.AnyEvent = _event_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _decode_event_slow(data)
    if event.schema_version == SCHEMA_VERSION:
        return event
    return _decode_event_slow(data)


def event_from_builtins(payload: dict[str, Any]) -> decisions.AnyEvent:
    """Decode an event from an already-parsed dict (e.g. a JSONB column), upcasting it."""
    lifted = upcasters.upcast(dict(payload), target=SCHEMA_VERSION)
    try:
        result: decisions.AnyEvent = msgspec.convert(lifted, decisions.AnyEvent)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"invalid event {payload.get('type')!r}: {exc}") from exc
    return result


def _decode_event_slow(data: bytes | str) -> decisions.AnyEvent:
    try:
        payload = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed event payload: {exc}") from exc
    if not isinstance(payload, dict):
        raise DecodeError("malformed event payload: not a JSON object")
    return event_from_builtins(payload)
