"""Upcasters: rewrite stored payloads written by an older schema version before decoding.

A registry keyed by (tag, from_version); each function takes the raw payload dict of version
``from_version`` and returns the dict of ``from_version + 1``. Applied repeatedly until the
payload reaches :data:`events.base.SCHEMA_VERSION`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Payload = dict[str, Any]
Upcaster = Callable[[Payload], Payload]

_REGISTRY: dict[tuple[str, int], Upcaster] = {}


def register(tag: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Decorator registering ``fn`` to lift payloads of ``tag`` from ``from_version`` by one."""

    def wrap(fn: Upcaster) -> Upcaster:
        _REGISTRY[(tag, from_version)] = fn
        return fn

    return wrap


def upcast(payload: Payload, *, target: int) -> Payload:
    """Lift ``payload`` to schema version ``target``; versions with no upcaster just bump the number."""
    tag = str(payload.get("type", ""))
    version = int(payload.get("schema_version", 1))
    while version < target:
        step = _REGISTRY.get((tag, version))
        if step is not None:
            payload = step(dict(payload))
        version += 1
        payload["schema_version"] = version
    return payload


@register("allocation_granted", 0)
def _granted_v0(payload: Payload) -> Payload:
    """Version 0 (pre-release) stored ``gpu_names`` and no ``charges``; charges were the request.

    Total over any JSON shape (a hostile or corrupt payload): what is not the expected shape is
    left for the decoder, which then names the field (DecodeError), never an AttributeError here."""
    if "gpu_names" in payload:
        payload["gpus"] = payload.pop("gpu_names")
    if "charges" not in payload:
        spec = payload.get("spec")
        request = spec.get("request", {}) if isinstance(spec, dict) else {}
        gpus = payload.get("gpus")
        payload["charges"] = [request for _ in gpus] if isinstance(gpus, list) else []
    return payload
