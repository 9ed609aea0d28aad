"""Input bounds of the HTTP API: every request body and query value is hostile until checked.

Owns :class:`ApiError` (a 4xx answer ``{"error", "field"}``) and the body reader: at most
:data:`MAX_BODY_BYTES` (413 beyond), a declared charset must be UTF-8 or ASCII (415), the bytes
must be valid UTF-8 (400), the document is JSON or YAML (``yaml.SafeLoader``: no Python objects)
nested at most :data:`MAX_DEPTH` deep with at most :data:`MAX_NODES` values once aliases are
expanded (a YAML alias bomb is refused, 400), and the top level must be an object.

Parsing has a bounded cost and never runs on the event loop for a large body: a body of at most
:data:`INLINE_BYTES` is parsed in place (well under a millisecond); a larger one goes to the
app's :class:`BodyParser`, a worker process that parses it within :data:`PARSE_TIMEOUT_S` seconds
(413 beyond, and the worker is replaced), with at most :data:`MAX_WAITING` bodies waiting for it
(503 beyond). PyYAML's pure-Python loader takes seconds on a 1 MiB document; in the worker it only
delays that one request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import multiprocessing
from typing import Any

import structlog
import yaml
from aiohttp import web

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
INLINE_BYTES = 16 << 10
"""Bodies up to 16 KiB are parsed on the event loop (a Pod manifest is about 2 KiB)."""
PARSE_TIMEOUT_S = 5.0
"""Longest a body may take to parse in the worker, waiting included (413 beyond)."""
MAX_WAITING = 8
"""Most large bodies waiting for the worker at once (503 beyond: the client may retry)."""


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


def _parse_checked(text: str) -> tuple[Any, int, str, str]:
    """Worker-process entry: ``(document, 0, "", "")`` or ``(None, status, message, field)`` of
    the ApiError that refused it (an exception with keyword arguments does not cross processes)."""
    try:
        document = parse_document(text)
        _check_size(document)
    except ApiError as exc:
        return None, exc.status, exc.message, exc.field
    return document, 0, "", ""


class BodyParser:
    """Parses request bodies larger than :data:`INLINE_BYTES` in one worker process (spawned on
    first use), each within ``timeout_s`` seconds and with at most ``max_waiting`` waiting; a parse
    past its time kills the worker (a new one serves the next body). :meth:`close` ends it."""

    def __init__(self, *, timeout_s: float = PARSE_TIMEOUT_S, max_waiting: int = MAX_WAITING) -> None:
        self.timeout_s = timeout_s
        self.max_waiting = max_waiting
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._waiting = 0

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    async def warm(self) -> None:
        """Start the worker now (its first body then does not wait for a process start)."""
        await self.parse("{}" + " " * INLINE_BYTES)

    async def parse(self, text: str) -> Any:
        """``text`` as a checked document (:func:`parse_document` and the size walk); raises
        ApiError 400 for a bad document, 413 past the time bound, 503 when too many wait."""
        if len(text) <= INLINE_BYTES:
            return _parse_checked_or_raise(_parse_checked(text))
        if self._waiting >= self.max_waiting:
            raise ApiError(503, f"{self._waiting} large bodies are being parsed; retry shortly", field="body")
        self._waiting += 1
        pool = self._executor()
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await asyncio.get_running_loop().run_in_executor(pool, _parse_checked, text)
        except TimeoutError:
            self._replace(pool)
            raise ApiError(413, f"body took longer than {self.timeout_s:g} s to parse; send a smaller or "
                           "simpler document (JSON parses fastest)", field="body") from None
        except concurrent.futures.process.BrokenProcessPool:
            self._replace(pool)
            raise ApiError(413, "body could not be parsed (the parser process ended)", field="body") from None
        finally:
            self._waiting -= 1
        return _parse_checked_or_raise(result)

    def _replace(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        """End ``pool``'s worker at once (a parse that overran); the next body starts a new one."""
        if self._pool is pool:
            self._pool = None
        for process in list((pool._processes or {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """End the worker (no wait)."""
        if self._pool is not None:
            self._replace(self._pool)


def _parse_checked_or_raise(result: tuple[Any, int, str, str]) -> Any:
    document, status, message, field = result
    if status:
        raise ApiError(status, message, field=field)
    return document


PARSER_KEY = web.AppKey("body_parser", BodyParser)
"""The app's BodyParser (an app without one parses every body in place: the writer has no bodies)."""


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
    parser = request.config_dict.get(PARSER_KEY)
    document = await parser.parse(text) if parser is not None else _parse_checked_or_raise(_parse_checked(text))
    if not isinstance(document, dict):
        raise ApiError(400, f"body must be an object, got {type(document).__name__}", field="body")
    return document
