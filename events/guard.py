"""The validation entry point of the contract: payload checks before decoding, field checks after.

``msgspec.Meta`` constraints (:mod:`events.bounds`) are enforced by the decoder itself; this
module checks what they cannot express and turns every failure into a
:class:`events.bounds.BoundsError` naming the field (a JSON path such as
``spec.request.vram_bytes``) and the value:

* :func:`check_payload` - before msgspec sees the bytes: size (:data:`~events.bounds.MAX_INTENT_BYTES`),
  valid UTF-8 (the error names the byte position), nesting depth (:data:`~events.bounds.MAX_DEPTH`,
  so msgspec never recurses deep enough to raise ``RecursionError``) and NUL characters
  (PostgreSQL JSONB cannot store ``\\u0000``).
* :func:`named` - a ``msgspec.ValidationError`` as a BoundsError with the field and the value.
* :func:`check_message` - what a producer calls before publishing a message it built in code:
  the same checks a decoder would make (encode, check, decode with the message's own type).
* :func:`surrogate_field` - the path of the first string holding a lone surrogate (``"\\ud800"``
  decoded from JSON is a Python string but no Unicode text: it cannot be encoded as UTF-8).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, TypeVar

import msgspec

from events.bounds import (
    MAX_ATTRIBUTES_BYTES,
    MAX_DEPTH,
    MAX_INTENT_BYTES,
    BoundsError,
    echo,
)

M = TypeVar("M", bound=msgspec.Struct)

_VALUE_ECHO = 256
"""Bytes of an offending value quoted in an error (the whole payload is never quoted)."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A JSON string (the unrolled form: runs of plain bytes are matched in one step)."""
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_PATH = re.compile(r" - at `(?P<key>key` in `)?\$(?P<path>[^`]*)`$")
_MISSING = re.compile(r"missing required field `(?P<name>[^`]+)`")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_untyped = msgspec.json.Decoder(float_hook=Decimal)
_encoder = msgspec.json.Encoder()


def check_payload(data: bytes | bytearray | memoryview | str, *, limit: int = MAX_INTENT_BYTES) -> bytes:
    """The payload as bytes, checked for size, UTF-8, nesting depth and NUL; raises BoundsError.

    The common case (a small ASCII payload with few brackets) costs a handful of C-level scans.
    """
    if isinstance(data, bytes):
        raw = data
    elif isinstance(data, str):
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BoundsError(f"invalid UTF-8 at character {exc.start}", value=repr(data[exc.start])) from None
    else:
        raw = bytes(data)
    if len(raw) > limit:
        raise BoundsError(f"payload of {len(raw)} bytes exceeds the limit of {limit} bytes", value=str(len(raw)))
    if not raw.isascii():
        check_utf8(raw)
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH:
        check_depth(raw)
    if b"\\u0000" in raw:
        raise BoundsError("strings must not contain NUL (\\u0000) characters", value="\\u0000")
    return raw


def check_utf8(raw: bytes) -> None:
    """Raise BoundsError naming the byte position when ``raw`` is not valid UTF-8."""
    if raw.isascii():
        return
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start:exc.start + 4]
        raise BoundsError(f"invalid UTF-8 at byte {exc.start} ({bad!r})", value=repr(bad)) from None


def check_depth(raw: bytes, max_depth: int = MAX_DEPTH) -> None:
    """Raise BoundsError when JSON arrays/objects in ``raw`` nest deeper than ``max_depth``."""
    depth = too_deep(raw, max_depth)
    if depth:
        raise BoundsError(f"JSON nested {depth} levels deep; at most {max_depth} allowed", value=str(depth))


def too_deep(raw: bytes, max_depth: int = MAX_DEPTH) -> int:
    """The nesting depth of JSON arrays/objects in ``raw`` when above ``max_depth``, else 0.

    Iterative and linear (brackets inside strings ignored); a payload with at most ``max_depth``
    brackets in all is answered without scanning. Unbalanced input is left to the decoder.
    """
    if raw.count(b"{") + raw.count(b"[") <= max_depth:
        return 0
    depth = deepest = 0
    for bracket in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        if bracket in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest if deepest > max_depth else 0


def named(exc: msgspec.ValidationError, raw: bytes | None = None, *, prefix: str = "invalid") -> BoundsError:
    """A BoundsError for ``exc``: ``field`` from msgspec's ``$.a.b[0]`` path, ``value`` looked up in
    ``raw`` (the checked payload) when given."""
    text = str(exc)
    match = _PATH.search(text)
    path = match.group("path") if match else ""
    missing = _MISSING.search(text)
    if missing:
        path = f"{path}.{missing.group('name')}"
    field = path.replace("[...]", "").lstrip(".")
    value = "" if missing or raw is None or (match and match.group("key")) else _value_at(raw, path)
    message = f"{prefix}: {text}" + (f" (got {value})" if value else "")
    return BoundsError(message, field=field, value=value)


def _value_at(raw: bytes, path: str) -> str:
    try:
        node: Any = _untyped.decode(raw)
    except (msgspec.DecodeError, ValueError):
        return ""
    for name, index in _STEP.findall(path):
        try:
            node = node[name] if name else node[int(index)]
        except (KeyError, IndexError, TypeError):
            return ""
    shown = node if isinstance(node, (str, Decimal)) else _encoder.encode(node).decode()
    return echo(str(shown), _VALUE_ECHO)


def check_attributes(attributes: dict[str, str], *, field: str = "spec.attributes") -> None:
    """All keys and values of ``attributes`` together within MAX_ATTRIBUTES_BYTES UTF-8 bytes."""
    size = _utf8_size(attributes.items())
    if size > MAX_ATTRIBUTES_BYTES:
        raise BoundsError(
            f"{field}: {size} bytes of keys and values exceed the limit of {MAX_ATTRIBUTES_BYTES}",
            field=field,
            value=str(size),
        )


def _utf8_size(items: Iterable[tuple[str, str]]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in items)


def check_message(message: M) -> M:
    """``message`` if a decoder would accept it (every bound of :mod:`events.bounds`), else BoundsError.

    For producers that build messages in code (admission, discovery, the autoscaler): the same
    rules the allocator applies when it decodes, raised before anything is published.
    """
    try:
        encoded = _encoder.encode(message)
    except UnicodeEncodeError:
        field = surrogate_field(msgspec.to_builtins(message)) or ""
        raise surrogate_error(field) from None
    raw = check_payload(encoded)
    try:
        msgspec.json.decode(raw, type=type(message))
    except msgspec.ValidationError as exc:
        raise named(exc, raw) from None
    check_extras(message)
    return message


def check_extras(message: msgspec.Struct) -> None:
    """The cross-field bounds ``Meta`` cannot express (today: the total size of attributes)."""
    spec = getattr(message, "spec", message)
    attributes = getattr(spec, "attributes", None)
    if attributes and isinstance(attributes, dict):
        check_attributes(attributes, field="spec.attributes" if spec is not message else "attributes")


def _is_text(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def surrogate_field(document: Any, path: str = "") -> str | None:
    """The JSON path (``spec.placement``, ``items[2]``) of the first key or string value in
    ``document`` (dicts, lists, scalars) that holds a lone surrogate (U+D800-U+DFFF), or None.
    A key is named by its path with the key escaped (``metadata.labels.'\\ud800'``)."""
    stack: list[tuple[Any, str]] = [(document, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if not _is_text(value):
                return where
        elif isinstance(value, dict):
            for key, item in value.items():
                name = key if isinstance(key, str) else str(key)
                step = f"{where}.{name}" if where else name
                if not _is_text(name):
                    return f"{where}.{name!a}" if where else ascii(name)
                stack.append((item, step))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(value))
    return None


def surrogate_error(field: str) -> BoundsError:
    """The BoundsError for a lone surrogate at ``field`` (the message is plain ASCII)."""
    where = field or "a string"
    return BoundsError(f"{where}: holds a lone surrogate (U+D800-U+DFFF), which is not text; send valid UTF-8",
                       field=field, value="\\ud800-\\udfff")
