"""The CLI's client of the allocator's HTTP API (``/api/v1``), on the standard library's http.client.

One small module so that a command that only reads pays for nothing heavier than a socket. The
connect time is bounded (``CONNECT_TIMEOUT_S``) and nothing is retried: when no stack answers the
command fails at once with a message naming the URL and where it came from. Answers are JSON; a
4xx carries ``{"error", "field"}`` (raised as :class:`ApiError`), lists are pages ``{"items",
"continue"}`` that :meth:`Api.items` follows. An optional bearer token is sent as
``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from services.cli import endpoints

CONNECT_TIMEOUT_S = 2.0
"""Seconds to wait for the TCP connection to the allocator (a stack that is down fails at once)."""

PAGE_SIZE = 500
"""``limit`` asked for on each page of a list."""


class StackUnreachable(RuntimeError):
    """Nothing answers at the API URL (refused, timed out, not HTTP): exit code 1."""


class Pending(RuntimeError):
    """The API published the intent but had no decision within its wait (HTTP 202): exit code 1."""


class ApiError(RuntimeError):
    """The API answered an error: ``status`` (HTTP), ``field`` (None unless the input was bad), and
    the decoded answer ``body`` (a dict, or None)."""

    def __init__(self, message: str, *, status: int, field: str | None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.body = body


class _Connection(http.client.HTTPConnection):
    """HTTPConnection whose connect is bounded by ``connect_timeout`` and reads by ``timeout``."""

    def __init__(self, host: str, port: int | None, *, connect_timeout: float, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.connect_timeout = connect_timeout

    def connect(self) -> None:
        self.sock = socket.create_connection((self.host, self.port), self.connect_timeout)
        self.sock.settimeout(self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Api:
    """Calls to one allocator: ``base_url`` like ``http://127.0.0.1:8080``; ``where`` says where the
    URL came from (for messages); ``timeout_s`` bounds each read (a write waiting for a decision)."""

    def __init__(self, base_url: str, *, token: str = "", where: str = "", timeout_s: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ApiError(f"allocator URL must be http://host:port, got {base_url!r}", status=0, field="data_dir")
        self.base_url = base_url.rstrip("/")
        self.host, self.port = parts.hostname, parts.port
        self.token = token
        self.where = where
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                timeout_s: float | None = None) -> Any:
        """One call; returns the decoded JSON (None for an empty body).

        Raises StackUnreachable when nothing answers, ApiError for a 4xx/5xx answer.
        """
        target = path + ("?" + urlencode({k: v for k, v in query.items() if v not in (None, "")}) if query else "")
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        conn = _Connection(self.host, self.port, connect_timeout=CONNECT_TIMEOUT_S,
                           timeout=timeout_s if timeout_s is not None else self.timeout_s)
        try:
            conn.request(method, target, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise StackUnreachable(self._unreachable(exc)) from None
        finally:
            conn.close()
        answer = self._decode(response.status, raw)
        if response.status == 202:
            intent = answer.get("intent_id", "?") if isinstance(answer, dict) else "?"
            raise Pending(f"no decision yet for intent {intent}"
                          " (the allocator may be busy or standing by); it will still be decided: check with "
                          "`gpuledger events` or `gpuledger why`")
        return answer

    def _unreachable(self, exc: BaseException) -> str:
        why = "connection refused" if isinstance(exc, ConnectionRefusedError) else (
            "timed out" if isinstance(exc, TimeoutError) else (str(exc) or type(exc).__name__))
        origin = f" (from {self.where})" if self.where else ""
        return (f"no gpuledger allocator answers at {self.base_url}{origin}: {why}. "
                "Is `gpuledger up` running (or pass --data-dir)?")

    def _decode(self, status: int, raw: bytes) -> Any:
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = {"error": raw[:200].decode(errors="replace")}
        if status < 400:
            return data
        error = (data.get("error") or data.get("reason")) if isinstance(data, dict) else None
        field = data.get("field") if isinstance(data, dict) else None
        message = str(error or f"HTTP {status}")
        if status in (401, 403):
            message += f" (set {endpoints.API_TOKEN_ENV} or check the data dir's api-token)"
        raise ApiError(message, status=status, field=field if 400 <= status < 500 else None,
                       body=data if isinstance(data, dict) else None)

    def get(self, path: str, **query: Any) -> Any:
        """GET ``path`` with ``query`` (None/empty values left out)."""
        return self.request("GET", path, query=query)

    def items(self, path: str, *, limit: int = 0, **query: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list (``{"items", "continue"}``), following ``continue``; at
        most ``limit`` items when it is positive. A plain JSON list is accepted as one page."""
        token: str | None = None
        seen = 0
        while True:
            page = self.get(path, limit=PAGE_SIZE if limit <= 0 else min(PAGE_SIZE, limit - seen),
                            **query, **({"continue": token} if token else {}))
            batch = page if isinstance(page, list) else page.get("items", [])
            for item in batch:
                yield item
                seen += 1
                if 0 < limit <= seen:
                    return
            token = None if isinstance(page, list) else page.get("continue")
            if not token or not batch:
                return


def quoted(segment: str) -> str:
    """``segment`` escaped for use as one path segment (an allocation id or node name)."""
    return quote(segment, safe="")


def connect(data_dir: Path | None, *, timeout_s: float = 30.0) -> Api:
    """The Api of the stack found by ``endpoints.resolve`` (raises EndpointsError when none)."""
    found = endpoints.resolve(data_dir)
    if not found.allocator_http:
        raise endpoints.EndpointsError(
            f"no allocator URL in {found.source or 'the environment'}: set {endpoints.API_URL_ENV} "
            "or pass --data-dir", field="data_dir")
    return Api(found.allocator_http, token=found.api_token, where=found.source, timeout_s=timeout_s)
