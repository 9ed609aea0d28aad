"""Parsing a request body (JSON or YAML) within bounds, and the worker process that does it for
large bodies (``python -m services.allocator.api.parse_worker``).

Lean on purpose (the standard library and PyYAML only): the worker starts in a fraction of a second.
YAML is read by PyYAML's safe loader, which builds no Python objects: libyaml's
(``yaml.CSafeLoader``, in PyYAML's wheels) when present, after a pass over its parse events has
checked the nesting (libyaml's composer recurses in C, so an unchecked deep document would crash the
process); the pure-Python ``yaml.SafeLoader`` otherwise, refusing the nesting while it composes. A 1
MiB Pod takes 0.3-0.7 s of CPU with libyaml and 1.4-2.5 s without
(``benchmarks/bench_yaml_body.py``; BENCHMARKS.md "Read load"). Either way nesting past
:data:`MAX_DEPTH` is refused, and the walk after it refuses more than :data:`MAX_NODES` values once
aliases are expanded (a YAML alias bomb).
The worker reads frames ``<8-byte big-endian length><UTF-8 text>`` on stdin and answers each with
``<length><pickle of (document, status, message, field)>`` on stdout (status 0: parsed); it exits at
the end of stdin. Only the reader that started it talks to it, and what it pickles is plain data
(SafeLoader's dicts, lists, strings, numbers, dates).
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
from typing import Any, BinaryIO

import yaml

MAX_DEPTH = 64
"""Deepest nesting of objects and lists accepted in a body (a Pod manifest needs about 12)."""
MAX_NODES = 100_000
"""Most values in a body with YAML aliases expanded (a 1 MiB Pod has far fewer)."""
HEADER = struct.Struct(">Q")
"""The frame header: the payload's length in bytes."""


class DocumentError(Exception):
    """A body that is not an acceptable document: HTTP ``status`` (400), ``message``, ``field``."""

    def __init__(self, status: int, message: str, *, field: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses documents nested deeper than MAX_DEPTH while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # the PyYAML composer hook
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise DocumentError(400, f"body is nested deeper than {MAX_DEPTH} levels", field="body")
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self._depth -= 1


_NODE_EVENTS = (yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)
_OPEN_EVENTS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE_EVENTS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _too_deep(text: str) -> bool:
    """Whether a node of YAML ``text`` lies deeper than MAX_DEPTH (the document's root at 1, as
    :class:`_BoundedLoader` counts), from libyaml's parse events: an iterative parser, no
    recursion however deep the text. Raises yaml.YAMLError for text that does not parse."""
    open_collections = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, _NODE_EVENTS):
            if open_collections + 1 > MAX_DEPTH:
                return True
            if isinstance(event, _OPEN_EVENTS):
                open_collections += 1
        elif isinstance(event, _CLOSE_EVENTS):
            open_collections -= 1
    return False


def _load_yaml(text: str) -> Any:
    """YAML ``text`` as Python values, nesting at most MAX_DEPTH; raises DocumentError(400) past it
    and yaml.YAMLError for text that does not parse."""
    if yaml.__with_libyaml__:
        if _too_deep(text):
            raise DocumentError(400, f"body is nested deeper than {MAX_DEPTH} levels", field="body")
        return yaml.load(text, Loader=yaml.CSafeLoader)  # the safe loader, in C
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()  # type: ignore[no-untyped-call]
    finally:
        loader.dispose()  # type: ignore[no-untyped-call]


def check_size(document: Any) -> None:
    """Walk ``document`` (aliases expanded) and refuse it past MAX_NODES values or MAX_DEPTH."""
    budget = MAX_NODES
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise DocumentError(400, f"body holds more than {MAX_NODES} values (YAML aliases expanded)", field="body")
        if depth > MAX_DEPTH:
            raise DocumentError(400, f"body is nested deeper than {MAX_DEPTH} levels", field="body")
        if isinstance(value, dict):
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _json_depth_ok(text: str) -> bool:
    """Cheap upper bound of JSON nesting (brackets inside strings are counted too)."""
    depth = 0
    for char in text:
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return False
        elif char in "]}":
            depth -= 1
    return True


def parse_document(text: str) -> Any:
    """JSON or YAML ``text`` as Python values; raises DocumentError(400) naming ``body``."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and _json_depth_ok(stripped):
        try:
            return json.loads(stripped)
        except ValueError:
            pass  # flow-style YAML is also valid here
    try:
        return _load_yaml(text)
    except DocumentError:
        raise
    except yaml.YAMLError as exc:
        raise DocumentError(400, f"body is not JSON or YAML: {exc}", field="body") from exc
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise DocumentError(400, f"body is not a JSON or YAML document: {exc}", field="body") from exc


def parse_checked(text: str) -> tuple[Any, int, str, str]:
    """``(document, 0, "", "")`` or ``(None, status, message, field)`` of the DocumentError that
    refused ``text`` (:func:`parse_document` then :func:`check_size`)."""
    try:
        document = parse_document(text)
        check_size(document)
    except DocumentError as exc:
        return None, exc.status, exc.message, exc.field
    return document, 0, "", ""


def _read_exactly(stream: BinaryIO, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def serve(source: BinaryIO, sink: BinaryIO) -> None:
    """Answer frames from ``source`` on ``sink`` until ``source`` ends (module docstring)."""
    while (header := _read_exactly(source, HEADER.size)) is not None:
        payload = _read_exactly(source, HEADER.unpack(header)[0])
        if payload is None:
            return
        answer = pickle.dumps(parse_checked(payload.decode("utf-8")), protocol=pickle.HIGHEST_PROTOCOL)
        sink.write(HEADER.pack(len(answer)) + answer)
        sink.flush()


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
