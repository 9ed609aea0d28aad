"""The kubernetes-asyncio boundary: ApiClient factory and a watch that survives restarts and 410 Gone.

:func:`api_client` picks the connection: an explicit URL (tests, ``kubectl proxy``), else a
kubeconfig file, else the in-cluster service account. :func:`watch_objects` turns any list call
of kubernetes-asyncio (``CoreV1Api.list_node``, ``list_namespaced_custom_object`` via
``functools.partial``) into a stream of raw-dict :class:`WatchEvent` that resumes from the last
resourceVersion when the stream ends and re-lists on 410 Gone, synthesising DELETED for objects
that vanished meanwhile. It knows nothing about GPUs.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import structlog
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

log = structlog.get_logger(__name__)

SYNCED = "SYNCED"
"""Pseudo event type: a (re-)list finished; every current object has been reported."""


class KubeConfigError(RuntimeError):
    """No way to reach an API server: no URL, no kubeconfig and not in a cluster."""


class WatchEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One change: ``type`` ADDED / MODIFIED / DELETED / SYNCED; ``object`` the raw JSON dict."""

    type: str
    object: dict[str, Any]


async def api_client(*, url: str = "", kubeconfig: str = "", context: str = "", token: str = "",
                     verify_ssl: bool = True) -> client.ApiClient:
    """A new ApiClient (caller closes it).

    Precedence: ``url`` (plain Configuration, optional bearer ``token``) > ``kubeconfig`` (or the
    KUBECONFIG variable, or ~/.kube/config when it exists) > in-cluster service account.
    Raises :class:`KubeConfigError` when none applies.
    """
    if url:
        configuration = client.Configuration(host=url.rstrip("/"))
        configuration.verify_ssl = verify_ssl
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(configuration=configuration)
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    if not path and (Path.home() / ".kube" / "config").exists():
        path = str(Path.home() / ".kube" / "config")
    if path:
        return await config.new_client_from_config(config_file=path, context=context or None,
                                                   persist_config=False)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return client.ApiClient(configuration=configuration)
    raise KubeConfigError("no Kubernetes API: set an API URL, a kubeconfig (KUBECONFIG) or run in a cluster")


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class _Gone(Exception):
    """The watch's resourceVersion was compacted: re-list."""


async def _lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Newline-delimited chunks of a streaming body, with no per-line size limit."""
    buffer = b""
    async for chunk in response.content.iter_any():
        buffer += chunk
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


async def _call(list_fn: Callable[..., Awaitable[Any]], **kwargs: Any) -> aiohttp.ClientResponse:
    """Call ``list_fn`` unparsed; a non-2xx answer becomes ApiException (status, Status message)."""
    response: aiohttp.ClientResponse = await list_fn(_preload_content=False, **kwargs)
    if 200 <= response.status < 300:
        return response
    async with response:
        text = await response.text()
    try:
        message = json.loads(text).get("message", text)
    except ValueError:
        message = text
    raise ApiException(status=response.status, reason=message)


class _Watch:
    """State of one resumable watch: last resourceVersion and the objects seen."""

    def __init__(self, list_fn: Callable[..., Awaitable[Any]], *, timeout_s: int) -> None:
        self.list_fn = list_fn
        self.timeout_s = timeout_s
        self.resource_version = ""
        self.known: dict[tuple[str, str], dict[str, Any]] = {}

    async def relist(self) -> list[WatchEvent]:
        """LIST; return ADDED/MODIFIED for present objects and DELETED for vanished ones, then SYNCED."""
        response = await _call(self.list_fn, _request_timeout=self.timeout_s + 30)
        async with response:
            body = json.loads(await response.read())
        self.resource_version = str(body.get("metadata", {}).get("resourceVersion", ""))
        items = {_key(item): item for item in body.get("items") or []}
        out = [WatchEvent(type="DELETED", object=obj) for k, obj in self.known.items() if k not in items]
        for key, item in items.items():
            if self.known.get(key) != item:
                out.append(WatchEvent(type="MODIFIED" if key in self.known else "ADDED", object=item))
        self.known = items
        out.append(WatchEvent(type=SYNCED, object={}))
        return out

    def accept(self, line: bytes) -> WatchEvent | None:
        """One watch line -> event (None for bookmarks); raises _Gone on 410 and ApiException on ERROR."""
        event = json.loads(line)
        kind, obj = event.get("type", ""), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone(obj.get("message", ""))
            raise ApiException(status=obj.get("code", 500), reason=obj.get("message", "watch error"))
        self.resource_version = str(obj.get("metadata", {}).get("resourceVersion", self.resource_version))
        if kind == "BOOKMARK":
            return None
        if kind == "DELETED":
            self.known.pop(_key(obj), None)
        else:
            self.known[_key(obj)] = obj
        return WatchEvent(type=kind, object=obj)

    async def stream(self) -> AsyncIterator[WatchEvent]:
        """Events of one watch request from the current resourceVersion until the server ends it."""
        response = await _call(
            self.list_fn, watch=True, resource_version=self.resource_version, timeout_seconds=self.timeout_s,
            allow_watch_bookmarks=True, _request_timeout=self.timeout_s + 30)
        async with response:
            async for line in _lines(response):
                event = self.accept(line)
                if event is not None:
                    yield event


async def _pause(delay: float, ceiling: float) -> float:
    """Sleep ``delay`` seconds; return the next (doubled, capped) delay."""
    await asyncio.sleep(delay)
    return min(delay * 2, ceiling)


async def watch_objects(list_fn: Callable[..., Awaitable[Any]], *, timeout_s: int = 300,
                        retry_delay_s: float = 1.0, max_retry_delay_s: float = 30.0
                        ) -> AsyncIterator[WatchEvent]:
    """Yield every change of the listed objects forever (until the consumer stops iterating).

    ``list_fn`` is a kubernetes-asyncio list method taking keyword args (bind positional ones with
    ``functools.partial``). Starts with a LIST (ADDED per object, then SYNCED), then watches from
    its resourceVersion; a stream that ends (server timeout ``timeout_s``, restart) is resumed from
    the last resourceVersion seen; 410 Gone (HTTP status or ERROR event) re-lists and reports the
    difference (DELETED for objects gone meanwhile). Other errors are retried with exponential
    backoff from ``retry_delay_s`` up to ``max_retry_delay_s``, logged as warnings; 401/403/404 raise.
    """
    state = _Watch(list_fn, timeout_s=timeout_s)
    delay, listed = retry_delay_s, False
    while True:
        try:
            if not listed:
                for event in await state.relist():
                    yield event
                listed = True
            started, seen = time.monotonic(), 0
            async for event in state.stream():
                delay, seen = retry_delay_s, seen + 1
                yield event
            if not seen and time.monotonic() - started < 1.0:  # a server ending watches at once
                delay = await _pause(delay, max_retry_delay_s)
        except _Gone as gone:
            log.info("watch resourceVersion expired; re-listing", reason=str(gone))
            listed = False
        except ApiException as exc:
            if exc.status in (401, 403, 404):
                raise
            listed = listed and exc.status != 410
            if exc.status != 410:
                log.warning("watch failed; retrying", status=exc.status, reason=exc.reason, delay_s=delay)
                delay = await _pause(delay, max_retry_delay_s)
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as exc:
            log.warning("watch connection failed; retrying", error=repr(exc), delay_s=delay)
            delay = await _pause(delay, max_retry_delay_s)
