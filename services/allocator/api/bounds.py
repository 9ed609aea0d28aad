"""Input bounds of the HTTP API: every request body and query value is hostile until checked.

Owns :class:`ApiError` (a 4xx answer ``{"error", "field"}``) and the body reader: at most
:data:`MAX_BODY_BYTES` (413 beyond), a declared charset must be UTF-8 or ASCII (415), the bytes
must be valid UTF-8 (400), no string may hold a lone surrogate (JSON ``"\\ud800"``; 400 naming
its field), the document is JSON or YAML (``yaml.SafeLoader``: no Python objects)
nested at most :data:`MAX_DEPTH` deep with at most :data:`MAX_NODES` values once aliases are
expanded (a YAML alias bomb is refused, 400), and the top level must be an object.
"""

from __future__ import annotations

import json
from typing import Any

import structlog
import yaml
from aiohttp import web

from events import guard as events_guard
from events.values import AllocationSpec
from services import podspec

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 1 << 20
"""Largest request body (1 MiB), as NATS's default payload limit."""
MAX_DEPTH = 64
"""Deepest nesting of objects and lists accepted in a body (a Pod manifest needs about 12)."""
MAX_NODES = 100_000
"""Most values in a body with YAML aliases expanded (a 1 MiB Pod has far fewer)."""
_CHARSETS = {"utf-8", "utf8", "us-ascii", "ascii"}


class ApiError(Exception):
    """A refused request: HTTP ``status`` (4xx), ``message`` and the ``field`` it names."""

    def __init__(self, status: int, message: str, *, field: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field

    def response(self) -> web.Response:
        """The JSON answer ``{"error", "field"}``."""
        return web.json_response({"error": self.message, "field": self.field}, status=self.status)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses documents nested deeper than MAX_DEPTH while composing."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # the PyYAML composer hook
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise ApiError(400, f"body is nested deeper than {MAX_DEPTH} levels", field="body")
            return super().compose_node(parent, index)  # type: ignore[no-untyped-call]
        finally:
            self._depth -= 1


def _check_size(document: Any) -> None:
    """Walk ``document`` (aliases expanded) and refuse it past MAX_NODES values or MAX_DEPTH."""
    budget = MAX_NODES
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise ApiError(400, f"body holds more than {MAX_NODES} values (YAML aliases expanded)", field="body")
        if depth > MAX_DEPTH:
            raise ApiError(400, f"body is nested deeper than {MAX_DEPTH} levels", field="body")
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
    """JSON or YAML ``text`` as Python values; raises ApiError(400) naming ``body``."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and _json_depth_ok(stripped):
        try:
            return json.loads(stripped)
        except ValueError:
            pass  # flow-style YAML is also valid here
    try:
        loader = _BoundedLoader(text)
        try:
            return loader.get_single_data()  # type: ignore[no-untyped-call]
        finally:
            loader.dispose()  # type: ignore[no-untyped-call]
    except ApiError:
        raise
    except yaml.YAMLError as exc:
        raise ApiError(400, f"body is not JSON or YAML: {exc}", field="body") from exc
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise ApiError(400, f"body is not a JSON or YAML document: {exc}", field="body") from exc


def compose_pod(pod: dict[str, Any]) -> AllocationSpec:
    """The Pod's allocation request (services.podspec.compose): a PodSpecError is 400 naming its
    field; any other error while reading the Pod (a gap in the parser's own checks) is 400 too,
    naming ``body``, and logged: a hostile manifest must never be a 5xx."""
    try:
        return podspec.compose(pod)
    except podspec.PodSpecError as exc:
        raise ApiError(400, str(exc), field=exc.field) from exc
    except (ArithmeticError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        log.warning("the pod parser failed on a manifest", error=repr(exc))
        raise ApiError(400, f"the Pod could not be read: {type(exc).__name__}", field="body") from exc


async def read_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON/YAML object (dict), within every bound of this module."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        raise ApiError(413, f"body of {request.content_length} bytes is over {MAX_BODY_BYTES}", field="body")
    charset = (request.charset or "utf-8").lower()
    if charset not in _CHARSETS:
        raise ApiError(415, f"charset {charset!r} is not supported; send UTF-8", field="Content-Type")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise ApiError(413, f"body is over {MAX_BODY_BYTES} bytes", field="body") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"body is not valid UTF-8 (byte {exc.start})", field="body") from exc
    if "\x00" in text:
        raise ApiError(400, "body contains a NUL character", field="body")
    document = parse_document(text)
    _check_size(document)
    if not isinstance(document, dict):
        raise ApiError(400, f"body must be an object, got {type(document).__name__}", field="body")
    surrogate = events_guard.surrogate_field(document)
    if surrogate is not None:  # JSON's "\ud800" decodes to a str that is not text (no UTF-8 form)
        raise ApiError(400, str(events_guard.surrogate_error(surrogate)), field=surrogate or "body")
    return document
