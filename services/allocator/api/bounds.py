"""Input bounds of the HTTP API: every request body and query value is hostile until checked.

Owns :class:`ApiError` (a 4xx answer ``{"error", "field"}``) and the body reader: at most
:data:`MAX_BODY_BYTES` (413 beyond), a declared charset must be UTF-8 or ASCII (415), the bytes must
be valid UTF-8 (400), no string may hold a lone surrogate (JSON ``"\\ud800"``; 400 naming its
field), the document is JSON or YAML (PyYAML's safe loader, libyaml's when present: no Python
objects; :mod:`~services.allocator.api.parse_worker`) nested at most :data:`MAX_DEPTH` deep with at
most :data:`MAX_NODES` values once aliases are expanded (a YAML alias bomb is refused, 400), and the
top level must be an object.

Parsing has a bounded cost and never runs on the event loop for a large body: a body of at most
:data:`INLINE_BYTES` is parsed in place (well under a millisecond); a larger one goes to the
app's :class:`BodyParser`, a worker process that parses it within :data:`PARSE_TIMEOUT_S` seconds
(413 beyond, and the worker is replaced), with at most :data:`MAX_WAITING` bodies waiting for it, each
at most as long (503 beyond). A 1 MiB YAML document takes a third to two thirds of a second of
CPU with libyaml (seconds with PyYAML's pure-Python loader); in the worker it only delays that one
request (the reader's event loop keeps answering everything else).
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import sys
from typing import Any

import structlog
from aiohttp import web

from events import guard as events_guard
from events.values import AllocationSpec, Resources
from services import podspec
from services.allocator.api import parse_worker
from services.allocator.api.parse_worker import HEADER, parse_checked
from services.allocator.domain.state import ClusterState

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 1 << 20
"""Largest request body (1 MiB), as NATS's default payload limit."""
MAX_DEPTH = parse_worker.MAX_DEPTH
"""Deepest nesting accepted in a body."""
MAX_NODES = parse_worker.MAX_NODES
"""Most values in a body with YAML aliases expanded."""
_CHARSETS = {"utf-8", "utf8", "us-ascii", "ascii"}
INLINE_BYTES = 16 << 10
"""Bodies up to 16 KiB are parsed on the event loop (a Pod manifest is about 2 KiB)."""
PARSE_TIMEOUT_S = 10.0
"""Longest a body may wait for the worker (503 beyond), and then take to parse there (413 beyond)."""
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


def compose_pod(pod: dict[str, Any], state: ClusterState | None = None) -> AllocationSpec:
    """The Pod's allocation request (services.podspec.compose): a PodSpecError is 400 naming its
    field; any other error while reading the Pod (a gap in the parser's own checks) is 400 too,
    naming ``body``, and logged: a hostile manifest must never be a 5xx.

    ``state`` (the reader's projection) supplies the cluster facts the webhook reads from its own
    caches (services/admission/view.py), so ``simulate`` and ``submit`` compose what admission
    would: each GPU model's full capacity (``dedicated-gpu``), the namespace's quota defaults
    (``defaultRequests``/``defaultLimits``) and the known pools (those with a node or a
    configuration: a Pod naming another is 400 naming the pool annotation and the known pools;
    none is checked while the projection has no pool, as the webhook's view). WorkloadProfiles and
    PriorityClasses live only in Kubernetes: a Pod naming one is composed without it here."""
    try:
        if state is None:
            return podspec.compose(pod)
        meta = pod.get("metadata")
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        quota = state.quotas.get(namespace) if isinstance(namespace, str) else None
        pools = frozenset(state.pool_nodes.keys() | state.pools.keys())
        return podspec.compose(pod, quota_defaults=quota, context=podspec.ComposeContext(
            model_capacity=model_capacities(state), known_pools=pools or None))
    except podspec.PodSpecError as exc:
        raise ApiError(400, str(exc), field=exc.field) from exc
    except (ArithmeticError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        log.warning("the pod parser failed on a manifest", error=repr(exc))
        raise ApiError(400, f"the Pod could not be read: {type(exc).__name__}", field="body") from exc


def model_capacities(state: ClusterState) -> dict[str, Resources]:
    """GPU model -> the full capacity of a GPU of it, from the projection's GPUs (the webhook's
    ``model_capacity``, kept from NodeRegistered events). O(GPUs)."""
    found: dict[str, Resources] = {}
    for gpu in state.gpus.values():
        if gpu.spec.model and gpu.spec.model not in found:
            found[gpu.spec.model] = gpu.spec.capacity
    return found


class BodyParser:
    """Parses request bodies larger than :data:`INLINE_BYTES` in one worker process
    (:mod:`~services.allocator.api.parse_worker`, started on first use), one body at a time: a body
    waits for the worker at most ``timeout_s`` seconds (503 beyond) with at most ``max_waiting``
    waiting (503 beyond), then parses within ``timeout_s`` (413 beyond: the worker is killed and a
    new one serves the next body). :meth:`close` ends it."""

    def __init__(self, *, timeout_s: float = PARSE_TIMEOUT_S, max_waiting: int = MAX_WAITING) -> None:
        self.timeout_s = timeout_s
        self.max_waiting = max_waiting
        self.worker: asyncio.subprocess.Process | None = None
        self._killed: list[asyncio.subprocess.Process] = []
        self._lock = asyncio.Lock()
        self._waiting = 0

    async def _started(self) -> asyncio.subprocess.Process:
        if self.worker is None or self.worker.returncode is not None:
            self.worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "services.allocator.api.parse_worker", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        return self.worker

    async def warm(self) -> None:
        """Start the worker now (the first large body then does not wait for a process start)."""
        await self._started()

    async def parse(self, text: str) -> Any:
        """``text`` as a checked document; raises ApiError 400 for a bad document, 413 past the
        time bound, 503 when too many wait."""
        if len(text) <= INLINE_BYTES:
            return _document_or_raise(parse_checked(text))
        if self._waiting >= self.max_waiting:
            raise ApiError(503, f"{self._waiting} large bodies are waiting to be parsed; retry shortly", field="body")
        self._waiting += 1
        try:
            try:
                async with asyncio.timeout(self.timeout_s):
                    await self._lock.acquire()
            except TimeoutError:  # another body held the worker all along: not this one's fault
                raise ApiError(503, "the body parser stayed busy; retry shortly", field="body") from None
        finally:
            self._waiting -= 1
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await self._ask(text.encode("utf-8"))
        except TimeoutError:
            await self.aclose()
            raise ApiError(413, f"body took longer than {self.timeout_s:g} s to parse; send a smaller or "
                           "simpler document (JSON parses fastest)", field="body") from None
        except (OSError, EOFError, asyncio.IncompleteReadError, pickle.UnpicklingError) as exc:
            await self.aclose()
            log.warning("the body parser process failed", error=repr(exc))
            raise ApiError(413, "body could not be parsed (the parser process ended)", field="body") from None
        finally:
            self._lock.release()
        return _document_or_raise(result)

    async def _ask(self, payload: bytes) -> tuple[Any, int, str, str]:
        worker = await self._started()
        assert worker.stdin is not None and worker.stdout is not None  # PIPEs
        worker.stdin.write(HEADER.pack(len(payload)) + payload)
        await worker.stdin.drain()
        (size,) = HEADER.unpack(await worker.stdout.readexactly(HEADER.size))
        answer: tuple[Any, int, str, str] = pickle.loads(await worker.stdout.readexactly(size))
        return answer

    def close(self) -> None:
        """Kill the worker (reaped by :meth:`aclose`); the next large body starts a new one."""
        worker, self.worker = self.worker, None
        if worker is not None and worker.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
            self._killed.append(worker)

    async def aclose(self) -> None:
        """Kill the worker and wait for every killed one to end."""
        self.close()
        killed, self._killed = self._killed, []
        for worker in killed:
            with contextlib.suppress(ProcessLookupError):
                await asyncio.wait_for(worker.wait(), 10)


def _document_or_raise(result: tuple[Any, int, str, str]) -> Any:
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
    document = await parser.parse(text) if parser is not None else _document_or_raise(parse_checked(text))
    if not isinstance(document, dict):
        raise ApiError(400, f"body must be an object, got {type(document).__name__}", field="body")
    surrogate = events_guard.surrogate_field(document)
    if surrogate is not None:  # JSON's "\ud800" decodes to a str that is not text (no UTF-8 form)
        raise ApiError(400, str(events_guard.surrogate_error(surrogate)), field=surrogate or "body")
    return document
