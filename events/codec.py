"""Encoding and typed decoding of intents and events (JSON), decoders built once at import.

``decode_intent`` raises :class:`DecodeError` (with ``field`` and ``value``) for every payload it
cannot accept: malformed JSON, a wrong type, any bound of :mod:`events.bounds` (size, UTF-8,
nesting, ranges, lengths); never another exception. The allocator turns it into an
``IntentRejected`` event. ``decode_event`` upcasts payloads from older
schema versions and raises :class:`DecodeError` for anything it cannot read (never skips).
"""

from __future__ import annotations

from typing import Any

import msgspec

from events import bounds, decisions, guard, intents, upcasters
from events.base import SCHEMA_VERSION, Event, Intent
from events.bounds import BoundsError

_encoder = msgspec.json.Encoder()
_intent_decoder = msgspec.json.Decoder(intents.AnyIntent)
_event_decoder = msgspec.json.Decoder(decisions.AnyEvent)


class DecodeError(BoundsError):
    """A payload is not a valid message of the contract; ``str()`` says why, ``field`` names the
    offending JSON path ("" for the payload as a whole) and ``value`` the offending value."""


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
    """Decode one intent within the bounds of :mod:`events.bounds`.

    Raises DecodeError naming the offending field and value (or the byte position of invalid
    UTF-8, the nesting depth, the payload size) - and no other exception for any input.
    """
    try:
        raw = guard.check_payload(data)
        try:
            intent: intents.AnyIntent = _intent_decoder.decode(raw)
        except msgspec.ValidationError as exc:
            raise guard.named(exc, raw, prefix="invalid intent") from None
        guard.check_extras(intent)
    except BoundsError as exc:
        raise DecodeError(_with_prefix(str(exc)), field=exc.field, value=exc.value) from None
    except msgspec.DecodeError as exc:
        raise DecodeError(f"malformed intent payload: {exc}") from None
    except (RecursionError, UnicodeDecodeError, OverflowError) as exc:  # pragma: no cover - guarded above
        raise DecodeError(f"malformed intent payload: {exc}") from None
    return intent


def _with_prefix(message: str) -> str:
    return message if message.startswith("invalid intent") else f"invalid intent: {message}"


def decode_event(data: bytes | str) -> decisions.AnyEvent:
    """Decode one stored or published event, upcasting older schema versions.

    Raises DecodeError for anything it cannot read (invalid UTF-8 and nesting too deep for the
    decoder included), never another exception: readers of GPULEDGER_EVENTS skip such a message.
    """
    try:
        event: decisions.AnyEvent = _event_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _decode_event_slow(data)
    except (RecursionError, UnicodeDecodeError) as exc:  # a hostile message on GPULEDGER_EVENTS
        raise DecodeError(f"malformed event payload: {bounds.echo(str(exc), 512)}") from None
    if event.schema_version == SCHEMA_VERSION:
        return event
    return _decode_event_slow(data)


def event_from_builtins(payload: dict[str, Any]) -> decisions.AnyEvent:
    """Decode an event from an already-parsed dict (e.g. a JSONB column), upcasting it."""
    version = payload.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= SCHEMA_VERSION:
        raise DecodeError(f"invalid event {bounds.echo(str(payload.get('type')), 80)!r}: schema_version "
                          f"{bounds.echo(repr(version), 40)} outside [0, {SCHEMA_VERSION}]",
                          field="schema_version", value=bounds.echo(repr(version), 40))
    lifted = upcasters.upcast(dict(payload), target=SCHEMA_VERSION)
    try:
        result: decisions.AnyEvent = msgspec.convert(lifted, decisions.AnyEvent)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"invalid event {payload.get('type')!r}: {exc}") from exc
    return result


def _decode_event_slow(data: bytes | str) -> decisions.AnyEvent:
    try:
        payload = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise DecodeError(f"malformed event payload: {bounds.echo(str(exc), 512)}") from None
    if not isinstance(payload, dict):
        raise DecodeError("malformed event payload: not a JSON object")
    return event_from_builtins(payload)
