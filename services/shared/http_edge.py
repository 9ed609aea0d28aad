"""The HTTP edge of every gpuledger server (aiohttp): who may connect, for how long, and what is refused
before a route runs.

Two parts, applied by each server (the allocator's API and dashboard, the admission webhook):

* :class:`ConnectionGuard` and :func:`serve`: a connection cap and three deadlines. A connection must
  send a complete request head within ``header_timeout_s`` of being accepted, the body of a request
  must arrive within ``body_timeout_s`` of its head (408 otherwise), and a kept-alive connection
  may wait ``idle_timeout_s`` for its next request (aiohttp's keep-alive timer, which also closes a
  half-sent later head). At most ``max_connections`` connections are open per server: at the cap,
  the oldest connection with no handler running (idle, or still sending its head or body) is closed
  to make room, and when every one runs a handler the newcomer gets ``503`` and is closed. A stalled
  client therefore never pins the process's file descriptors, and the server keeps answering.
* :func:`request_policy`: a middleware that refuses a ``Host`` the server does not serve (421; DNS
  rebinding), a cross-site state-changing request (403: ``Sec-Fetch-Site`` other than
  ``same-origin``/``none``, or an ``Origin`` whose host is not the ``Host``), and a state-changing
  body whose ``Content-Type`` is not JSON (or YAML on the routes that take YAML) (415). A browser
  sends the cross-site "simple" types (``text/plain``, forms) without a CORS preflight; refusing
  them, and foreign origins, closes that door whether or not a token is configured.

Errors aiohttp meets before routing (a malformed request line or header) are logged as one short
line naming the exception class, the status and the peer, never the raw header (which may hold a
bearer token), at most :data:`LOG_BURST` lines per :data:`LOG_WINDOW_S` per server; the loop's
``socket.accept() out of system resource`` errors are rate-limited the same way.

Settings are ``GPULEDGER_HTTP_*`` variables (:class:`EdgeSettings`); docs/operations.md lists them
and docs/security.md gives the threat model. Every refusal is JSON ``{"error", "field"}``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import ssl
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec
import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler

from services.shared import settings as shared_settings

log = structlog.get_logger(__name__)

PREFIX = "GPULEDGER_HTTP_"
"""Prefix of the edge settings: ``header_timeout_s`` reads ``GPULEDGER_HTTP_HEADER_TIMEOUT_S``."""
LOG_BURST = 10
"""Lines one server logs about refused connections or malformed requests per :data:`LOG_WINDOW_S`."""
LOG_WINDOW_S = 60.0
MAX_LINE_BYTES = 8190
"""Longest request line and header line aiohttp accepts (400 beyond), its own default made explicit."""
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_TYPES = frozenset({"application/json"})
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml"})
SAME_SITE = frozenset({"same-origin", "none"})
"""``Sec-Fetch-Site`` values of a request a page of this origin, or the user, made (Fetch Metadata)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Refusal = Literal["host", "cross-site", "content-type"]


class EdgeSettings(msgspec.Struct, kw_only=True, frozen=True):
    """The edge's limits (seconds, connections) and the extra Host names served.

    - ``header_timeout_s``: from accept to a complete first request head (default 10).
    - ``body_timeout_s``: from a request's head to its whole body (default 30; 408 after).
    - ``idle_timeout_s``: a kept-alive connection's wait for its next request (default 15).
    - ``max_connections``: open connections per server; 0 (default) is a quarter of the process's
      soft ``RLIMIT_NOFILE``, at most 1,024 (256 under the common limit of 1,024 descriptors).
    - ``allowed_hosts``: comma-separated Host names served besides IP literals, ``localhost`` and the
      bind address, e.g. a Service name ``gpuledger-allocator``; an entry starting with ``.`` matches
      every name under it (``.svc.cluster.local``). Ports are ignored.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 15.0
    max_connections: int = 0
    allowed_hosts: str = ""

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            if not getattr(self, name) > 0:
                raise msgspec.ValidationError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.max_connections < 0:
            raise msgspec.ValidationError(f"max_connections must be >= 0, got {self.max_connections}")

    @property
    def connection_cap(self) -> int:
        """``max_connections``, or when 0 a quarter of the soft descriptor limit (16 to 1,024)."""
        if self.max_connections:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 1024
        return max(16, min(1024, soft // 4))

    @property
    def host_names(self) -> tuple[str, ...]:
        """``allowed_hosts`` as lower-case names without ports."""
        return tuple(_host_name(item) for item in self.allowed_hosts.split(",") if item.strip())


def load(environ: Mapping[str, str] | None = None) -> EdgeSettings:
    """:class:`EdgeSettings` from ``GPULEDGER_HTTP_*`` (``environ``, default os.environ); raises
    SettingsError naming a bad variable."""
    return shared_settings.load(EdgeSettings, prefix=PREFIX, environ=environ)


class RateLimitedLog:
    """At most ``burst`` lines per ``window_s`` seconds; the next line after a quiet window says how
    many were left out (``suppressed``)."""

    def __init__(self, server: str, *, burst: int = LOG_BURST, window_s: float = LOG_WINDOW_S) -> None:
        self.server = server
        self.burst, self.window_s = burst, window_s
        self._start, self._count, self.suppressed = 0.0, 0, 0

    def allow(self) -> bool:
        """Whether one more line may be written now (counts it)."""
        now = time.monotonic()
        if now - self._start >= self.window_s:
            self._start, self._count = now, 0
        self._count += 1
        if self._count > self.burst:
            self.suppressed += 1
            return False
        return True

    def warning(self, event: str, **fields: Any) -> None:
        """One warning line with ``fields`` (plain values only: never a raw request)."""
        if self.allow():
            extra = {"suppressed": self.suppressed} if self.suppressed else {}
            self.suppressed = 0
            log.warning(event, server=self.server, **fields, **extra)


class _QuietLogger(logging.Logger):
    """The logger aiohttp's request handler is given: its ``exception``/``error`` calls (a malformed
    request, a broken connection) become one rate-limited line without the exception's text, which
    quotes the offending header line (``Authorization: Bearer <token>\\x00``)."""

    def __init__(self, lines: RateLimitedLog) -> None:
        super().__init__("gpuledger.http_edge", logging.DEBUG)
        self.lines = lines

    def _short(self, msg: object, args: Any, exc_info: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        peer = str(args[0]) if isinstance(args, tuple) and args else ""
        self.lines.warning("request refused before routing", peer=peer,
                           error=type(exc).__name__ if exc is not None else str(msg)[:80],
                           status=getattr(exc, "code", None))

    def exception(self, msg: object, *args: object, exc_info: Any = True, **_: Any) -> None:
        self._short(msg, args, exc_info)

    def error(self, msg: object, *args: object, exc_info: Any = None, **_: Any) -> None:
        self._short(msg, args, exc_info)

    def warning(self, msg: object, *args: object, exc_info: Any = None, **_: Any) -> None:
        self._short(msg, args, exc_info)

    def debug(self, msg: object, *args: object, **_: Any) -> None:
        """Dropped: aiohttp logs non-HTTP bytes (a TLS hello on the plain port) at debug."""


class _AcceptErrors(logging.Filter):
    """Rate-limits asyncio's ``socket.accept() out of system resource`` records (one per refused
    accept while descriptors run out) and drops their traceback."""

    def __init__(self) -> None:
        super().__init__()
        self.lines = RateLimitedLog("event loop")

    def filter(self, record: logging.LogRecord) -> bool:
        if "out of system resource" not in str(record.msg):
            return True
        record.exc_info, record.exc_text = None, None
        record.msg = str(record.msg).split("\n", 1)[0]
        return self.lines.allow()


_ACCEPT_FILTER = _AcceptErrors()


_EARLY_BYTES = 4 << 20
"""Most bytes kept for a TLS connection between its handshake and aiohttp taking it over (one turn
of the event loop; a request and its 1 MiB body fit)."""


class _Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's handler behind the guard's deadline and bookkeeping."""

    def __init__(self, guard: ConnectionGuard, make: Callable[[], RequestHandler]) -> None:
        self.guard, self.make = guard, make
        self.inner: RequestHandler | None = None
        self.transport: asyncio.Transport | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.handling = 0
        """Requests of this connection whose handler runs (its head and body are in)."""
        self.started = False
        """Whether a request head arrived (the header deadline is then over)."""
        self.handshake: asyncio.Task[None] | None = None
        self.early: list[bytes] = []
        """Bytes decrypted after the TLS handshake but before start_tls returned (fed to aiohttp then)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.guard.admit(self):
            return
        loop = asyncio.get_running_loop()
        self.deadline = loop.call_later(self.guard.settings.header_timeout_s, self._expired)
        if self.guard.ssl_context is None:
            self._serve(transport)
            return
        # TLS after admission, so a connection that never finishes its handshake is counted and
        # closed like any other; nothing is read until start_tls takes over the transport
        transport.pause_reading()
        self.handshake = loop.create_task(self._start_tls(transport, self.guard.ssl_context))

    async def _start_tls(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
        try:
            secure = await asyncio.get_running_loop().start_tls(
                raw, self, context, server_side=True, ssl_handshake_timeout=self.guard.settings.header_timeout_s)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError, RuntimeError):
            raw.abort()  # a failed or abandoned handshake: connection_lost does the books
            return
        if secure is None or self.transport is None:  # lost while the handshake ran
            return
        assert isinstance(secure, asyncio.Transport)
        self.guard.retarget(self, secure)
        self._serve(secure)

    def _serve(self, transport: asyncio.Transport) -> None:
        self.inner = self.make()
        self.inner.connection_made(transport)
        early, self.early = self.early, []
        for data in early:
            self.inner.data_received(data)

    def _expired(self) -> None:
        self.deadline = None
        if not self.started and self.transport is not None:
            self.guard.closed["header_timeout"] += 1
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)
        elif self.transport is not None and sum(map(len, self.early)) + len(data) <= _EARLY_BYTES:
            self.early.append(data)
        elif self.transport is not None:
            self.transport.abort()  # more than a whole request within one turn of the loop

    def eof_received(self) -> None:
        if self.inner is not None:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        self.guard.forget(self)
        self.transport = None
        if self.inner is not None:
            self.inner.connection_lost(exc)
            self.inner = None

    def request_started(self) -> None:
        """A request head arrived (called by the guard's middleware)."""
        self.started = True
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None


_BUSY_BODY = b'{"error": "too many connections; retry shortly", "field": ""}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
         b"Retry-After: 1\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class ConnectionGuard:
    """Connection cap and deadlines of one server (see the module docstring).

    ``closed`` counts connections this guard ended, by reason: ``header_timeout``, ``evicted``
    (closed at the cap to make room), ``refused`` (503 at the cap), ``body_timeout``.
    """

    def __init__(self, settings: EdgeSettings, *, server: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.settings = settings
        self.ssl_context = ssl_context
        """TLS is started by the guard after admission (the listener itself is plain TCP)."""
        self.cap = settings.connection_cap
        self.lines = RateLimitedLog(server)
        self.open: dict[_Connection, None] = {}
        """Open connections, oldest first."""
        self._by_transport: dict[asyncio.BaseTransport, _Connection] = {}
        self.closed = {"header_timeout": 0, "evicted": 0, "refused": 0, "body_timeout": 0}

    def protocol_factory(self, server: Callable[[], RequestHandler]) -> Callable[[], asyncio.Protocol]:
        """The factory ``loop.create_server`` is given, wrapping aiohttp's ``server()``."""
        return lambda: _Connection(self, server)

    def admit(self, connection: _Connection) -> bool:
        """Register ``connection``, closing the oldest one without a running handler when at the cap;
        False (and a 503 written, the transport closed) when every open one runs a handler."""
        if len(self.open) >= self.cap:
            victim = next((c for c in self.open if c.handling == 0), None)
            if victim is None:
                self.closed["refused"] += 1
                self.lines.warning("connection refused: at the connection cap, every connection busy", cap=self.cap)
                assert connection.transport is not None
                if self.ssl_context is None:  # a TLS client could not read a plain answer
                    connection.transport.write(_BUSY)
                connection.transport.close()
                return False
            self.closed["evicted"] += 1
            self.lines.warning("connection cap reached: closed the oldest idle connection", cap=self.cap)
            self.forget(victim)
            if victim.transport is not None:
                victim.transport.abort()
        self.open[connection] = None
        assert connection.transport is not None
        self._by_transport[connection.transport] = connection
        return True

    def retarget(self, connection: _Connection, transport: asyncio.Transport) -> None:
        """``connection`` now runs over ``transport`` (its TLS transport)."""
        if connection.transport is not None:
            self._by_transport.pop(connection.transport, None)
        connection.transport = transport
        self._by_transport[transport] = connection

    def forget(self, connection: _Connection) -> None:
        """Drop ``connection`` from the books (idempotent)."""
        self.open.pop(connection, None)
        if connection.transport is not None and self._by_transport.get(connection.transport) is connection:
            del self._by_transport[connection.transport]

    @property
    def middleware(self) -> Middleware:
        """The first middleware of the app: marks the request's connection as started (its head
        arrived, so the header deadline is over)."""

        @web.middleware
        async def started(request: web.Request, handler: Handler) -> web.StreamResponse:
            connection = self._by_transport.get(request.transport) if request.transport is not None else None
            if connection is not None:
                connection.request_started()
            return await handler(request)
        return started

    @property
    def body_middleware(self) -> Middleware:
        """The last middleware of the app (after the policy and authentication, so a refused client
        never makes the server buffer a body): reads the body within ``body_timeout_s`` (408, the
        connection closed), then counts the connection busy while the handler runs."""

        @web.middleware
        async def body(request: web.Request, handler: Handler) -> web.StreamResponse:
            connection = self._by_transport.get(request.transport) if request.transport is not None else None
            if request.body_exists:
                try:
                    async with asyncio.timeout(self.settings.body_timeout_s):
                        await request.read()
                except TimeoutError:
                    self.closed["body_timeout"] += 1
                    response = _refuse(408, f"the request body did not arrive within "
                                            f"{self.settings.body_timeout_s:g} s", "body")
                    response.force_close()
                    return response
                except web.HTTPRequestEntityTooLarge as exc:
                    return _refuse(413, f"body is over the limit: {exc.text}", "body")
                except ConnectionError:  # the client left, or the guard closed it at the cap: no one to answer
                    response = _refuse(400, "the connection was lost while the body was sent", "body")
                    response.force_close()
                    return response
            if connection is not None:
                connection.handling += 1
            try:
                return await handler(request)
            finally:
                if connection is not None:
                    connection.handling -= 1
        return body


def _refuse(status: int, message: str, field: str) -> web.Response:
    return web.json_response({"error": message, "field": field}, status=status)


def _host_name(host: str) -> str:
    """The name of a ``Host`` value without its port, lower-case (``[::1]:80`` -> ``::1``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_served(host: str | None, *, bind_host: str, allowed: Collection[str]) -> bool:
    """Whether a request's ``Host`` is one this server answers to: absent (not a browser), an IP
    literal (a rebinding attack needs a name it controls), ``localhost``, the bind address, or a name
    of ``allowed`` (``.suffix`` entries match names under them). Ports are not compared: a port
    forward changes them, and a rebinding page can use any port."""
    if host is None:
        return True
    name = _host_name(host)
    if not name:
        return False
    if _is_ip(name) or name in ("localhost", _host_name(bind_host)):
        return True
    return any(name == entry or (entry.startswith(".") and name.endswith(entry)) for entry in allowed)


def request_policy(settings: EdgeSettings, *, bind_host: str,
                   yaml_routes: Collection[tuple[str, str]] = ()) -> Middleware:
    """The Host / cross-site / content-type middleware described in the module docstring.

    ``bind_host`` is the served address (its name is served); ``yaml_routes`` are ``(method,
    route path)`` pairs whose body may also be YAML, e.g. ``("POST", "/api/v1/simulate")``.
    Answers 421 (field ``Host``), 403 (``Origin`` or ``Sec-Fetch-Site``), 415 (``Content-Type``).
    """
    allowed = settings.host_names
    lines = RateLimitedLog("request policy")

    def refused(kind: Refusal, status: int, message: str, field: str, request: web.Request) -> web.Response:
        lines.warning("request refused", refusal=kind, method=request.method, path=request.path[:200])
        return _refuse(status, message, field)

    @web.middleware
    async def policy(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get("Host")
        if not host_served(host, bind_host=bind_host, allowed=allowed):
            return refused("host", 421, f"this server does not serve host {host!r}; add it to "
                                        f"{PREFIX}ALLOWED_HOSTS if it is a name of this server", "Host", request)
        if request.method in STATE_CHANGING:
            site = request.headers.get("Sec-Fetch-Site")
            if site is not None and site.lower() not in SAME_SITE:
                return refused("cross-site", 403, f"cross-site request refused (Sec-Fetch-Site: {site})",
                               "Sec-Fetch-Site", request)
            origin = request.headers.get("Origin")
            if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != (host or "").lower()):
                return refused("cross-site", 403, f"cross-origin request refused (Origin {origin!r} is not "
                                                  f"this server)", "Origin", request)
            if request.body_exists:
                route = request.match_info.route.resource
                path = route.canonical if route is not None else ""
                accepted = JSON_TYPES | (YAML_TYPES if (request.method, path) in yaml_routes else frozenset())
                if request.content_type not in accepted:
                    return refused("content-type", 415, f"Content-Type {request.content_type!r} is not accepted "
                                                        f"here; send {' or '.join(sorted(accepted))}",
                                   "Content-Type", request)
        return await handler(request)
    return policy


class _GuardedSite(web.TCPSite):
    """A TCPSite whose listener hands each connection to :class:`ConnectionGuard` first."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *, guard: ConnectionGuard,
                 ssl_context: ssl.SSLContext | None) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self.guard = guard
        self.where = (host, port, ssl_context)
        self.bound = port

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        host, port, context = self.where
        server = self._runner.server
        assert server is not None
        assert context is self.guard.ssl_context  # the guard starts TLS itself, after admission
        listener = await asyncio.get_running_loop().create_server(
            self.guard.protocol_factory(server), host, port, reuse_address=True)
        self._server = listener
        self.bound = int(listener.sockets[0].getsockname()[1]) if listener.sockets else port


async def serve(app: web.Application, *, host: str, port: int, server: str,
                settings: EdgeSettings | None = None,
                ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int, ConnectionGuard]:
    """Serve ``app`` on ``host:port`` (0: any free port) behind a :class:`ConnectionGuard`; returns
    the runner (``await runner.cleanup()``), the bound port and the guard. ``server`` names it in
    log lines. ``settings`` default to :func:`load`. The guard's middlewares are put first and last
    in ``app``."""
    settings = settings or load()
    guard = ConnectionGuard(settings, server=server, ssl_context=ssl_context)
    app.middlewares.insert(0, guard.middleware)
    app.middlewares.append(guard.body_middleware)
    quiet = _QuietLogger(guard.lines)
    logging.getLogger("asyncio").addFilter(_ACCEPT_FILTER)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, logger=quiet,
                           keepalive_timeout=settings.idle_timeout_s,
                           max_line_size=MAX_LINE_BYTES, max_field_size=MAX_LINE_BYTES)
    await runner.setup()
    site = _GuardedSite(runner, host, port, guard=guard, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site.bound, guard
