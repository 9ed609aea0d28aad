"""Query strings and pagination of the list endpoints.

Every list answers ``{"items": [...], "continue": "<token>" | null}``. ``limit`` (1..1000, default
100) bounds a page; ``continue`` is the opaque token of the previous page: the URL-safe base64 of
the JSON sort key of its last item, so a page starts strictly after it (items added or removed
meanwhile neither repeat nor shift the pages). Unknown parameters, repeated parameters and bad
values are refused with 400 naming the parameter.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from aiohttp import web

from services.allocator.api.bounds import ApiError

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_VALUE_CHARS = 253
"""Longest filter value (a Kubernetes name)."""
PAGING = ("limit", "continue")

Key = tuple[Any, ...]


def query(request: web.Request, *, allowed: Sequence[str], choices: Mapping[str, Sequence[str]] | None = None,
          ) -> dict[str, str]:
    """The query parameters (each at most once, only ``allowed`` plus paging, values of at most
    MAX_VALUE_CHARS characters, within ``choices`` where given); raises ApiError(400)."""
    out: dict[str, str] = {}
    for name in request.query:
        if name not in allowed and name not in PAGING:
            raise ApiError(400, f"unknown query parameter {name!r}; expected one of "
                           f"{', '.join([*allowed, *PAGING])}", field=name)
        values = request.query.getall(name)
        if len(values) != 1:
            raise ApiError(400, f"query parameter {name!r} given {len(values)} times", field=name)
        value = values[0]
        if len(value) > (MAX_VALUE_CHARS if name != "continue" else 4 * MAX_VALUE_CHARS):
            raise ApiError(400, f"{name} is longer than {MAX_VALUE_CHARS} characters", field=name)
        options = (choices or {}).get(name)
        if options is not None and value not in options:
            raise ApiError(400, f"{name} must be one of {', '.join(options)}, got {value!r}", field=name)
        out[name] = value
    return out


def limit_of(params: Mapping[str, str]) -> int:
    """``limit`` as an int in 1..MAX_LIMIT (DEFAULT_LIMIT when absent); raises ApiError(400)."""
    text = params.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
        raise ApiError(400, f"limit must be an integer from 1 to {MAX_LIMIT}, got {text!r}", field="limit")
    return int(text)


def encode_token(key: Key) -> str:
    """The opaque ``continue`` token of a sort key."""
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).decode().rstrip("=")


def decode_token(token: str, *, width: int | None) -> Key:
    """Inverse of :func:`encode_token`; raises ApiError(400) unless it is a list of strings and
    integers (of ``width`` items, when given)."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        key = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, "continue is not a token this API issued", field="continue") from exc
    if (not isinstance(key, list) or (width is not None and len(key) != width)
            or not all(isinstance(k, str | int) and not isinstance(k, bool) for k in key)):
        raise ApiError(400, "continue is not a token this API issued", field="continue")
    return tuple(key)


def page(items: Iterable[Any], *, key: Callable[[Any], Key], params: Mapping[str, str],
         render: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """One page of ``items`` sorted by ``key``: after the ``continue`` key, at most ``limit``,
    each rendered; ``continue`` is set when more items follow."""
    size = limit_of(params)
    ordered = sorted(items, key=key)
    token = params.get("continue")
    if token:
        after = decode_token(token, width=len(key(ordered[0])) if ordered else None)
        try:
            ordered = [item for item in ordered if key(item) > after]
        except TypeError as exc:  # a token from another list (other key types)
            raise ApiError(400, "continue is not a token of this list", field="continue") from exc
    chosen = ordered[:size]
    more = len(ordered) > size
    return {"items": [render(item) for item in chosen],
            "continue": encode_token(key(chosen[-1])) if more and chosen else None}
