"""GPUShare (gpuledger.io/v1, cluster-scoped) object -> (share name, events.values.ShareSpec) (pure).

Schema (deploy/crds/gpushares.yaml, docs/shares.md): ``metadata.name`` the share's name;
``spec.namespaces`` (list of namespace names), ``spec.parent``, ``spec.weight`` (1..1000, default 1),
``spec.pools[]`` each ``{pool, guaranteed, borrowingLimit, lendingLimit}`` with amounts
``{tflops, vram, gpus}``: TFLOPS a decimal Kubernetes quantity, VRAM bytes as a quantity, GPUs an
integer; a resource left out is not set. The API server's schema refuses most malformed objects;
what it lets through (an object written before the CRD was installed, a name the allocator would
refuse) raises PodSpecError naming the path and the value, as services.admission.quota does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events import names, quantity
from events.values import ShareAmount, SharePool, ShareSpec
from services.podspec import PodSpecError

_AMOUNT_KEYS = ("tflops", "vram", "gpus")
_POOL_KEYS = ("pool", "guaranteed", "borrowingLimit", "lendingLimit")
_SPEC_KEYS = ("namespaces", "parent", "weight", "pools")


def _known(raw: Mapping[str, Any], allowed: tuple[str, ...], *, field: str) -> None:
    extra = sorted(str(k) for k in raw if k not in allowed)
    if extra:
        raise PodSpecError(f"{field}.{extra[0]}: unknown field (expected {', '.join(allowed)})",
                           field=f"{field}.{extra[0]}", value=extra[0])


def _quantity(raw: Any, *, field: str, milli: bool) -> int:
    text = str(raw)
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise PodSpecError(f"{field}={text!r}: not a Kubernetes quantity", field=field, value=text)
    try:
        value = quantity.to_milli(text) if milli else quantity.to_value(text)
    except quantity.QuantityError:
        raise PodSpecError(f"{field}={text!r}: not a Kubernetes quantity", field=field, value=text) from None
    if value < 0:
        raise PodSpecError(f"{field}={text!r}: must not be negative", field=field, value=text)
    return value


def _count(raw: Any, *, field: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise PodSpecError(f"{field}={raw!r}: must be a non-negative integer", field=field, value=str(raw))
    return raw


def _amount(raw: Any, *, field: str) -> ShareAmount | None:
    """An amount object, None when absent; raises PodSpecError naming ``field.<resource>``."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise PodSpecError(f"{field}: must be an object {{tflops, vram, gpus}}", field=field, value=str(raw)[:64])
    _known(raw, _AMOUNT_KEYS, field=field)
    tflops, vram, gpus = raw.get("tflops"), raw.get("vram"), raw.get("gpus")
    return ShareAmount(
        milli_tflops=None if tflops is None else _quantity(tflops, field=f"{field}.tflops", milli=True),
        vram_bytes=None if vram is None else _quantity(vram, field=f"{field}.vram", milli=False),
        gpus=None if gpus is None else _count(gpus, field=f"{field}.gpus"))


def _pool(raw: Any, *, field: str) -> SharePool:
    if not isinstance(raw, Mapping):
        raise PodSpecError(f"{field}: must be an object {{pool, guaranteed, ...}}", field=field, value=str(raw)[:64])
    _known(raw, _POOL_KEYS, field=field)
    pool = raw.get("pool")
    if not isinstance(pool, str):
        raise PodSpecError(f"{field}.pool: a pool name is required", field=f"{field}.pool", value=str(pool))
    try:
        names.check("pool", pool, field=f"{field}.pool")
    except names.InvalidName as exc:
        raise PodSpecError(str(exc), field=f"{field}.pool", value=pool) from None
    return SharePool(pool=pool, guaranteed=_amount(raw.get("guaranteed"), field=f"{field}.guaranteed") or ShareAmount(),
                     borrowing_limit=_amount(raw.get("borrowingLimit"), field=f"{field}.borrowingLimit"),
                     lending_limit=_amount(raw.get("lendingLimit"), field=f"{field}.lendingLimit"))


def _list(raw: Any, *, field: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PodSpecError(f"{field}: must be a list", field=field, value=str(raw)[:64])
    return raw


def parse_share(obj: Mapping[str, Any]) -> tuple[str, ShareSpec]:
    """The share name and ShareSpec of a GPUShare object; raises PodSpecError on a malformed field
    (name, namespaces, parent, weight outside 1..1000, pools). Whether the share is acceptable
    next to the others (a namespace in two shares, an unknown parent) the allocator decides."""
    meta = obj.get("metadata")
    share = str((meta if isinstance(meta, Mapping) else {}).get("name") or "")
    try:
        names.check("share", share, field="metadata.name")
    except names.InvalidName as exc:
        raise PodSpecError(str(exc), field="metadata.name", value=share) from None
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    _known(spec, _SPEC_KEYS, field="spec")
    namespaces = []
    for i, namespace in enumerate(_list(spec.get("namespaces"), field="spec.namespaces")):
        try:
            namespaces.append(names.check("namespace", str(namespace), field=f"spec.namespaces.{i}"))
        except names.InvalidName as exc:
            raise PodSpecError(str(exc), field=f"spec.namespaces.{i}", value=str(namespace)) from None
    parent = spec.get("parent") or ""
    if parent:
        try:
            names.check("share", str(parent), field="spec.parent")
        except names.InvalidName as exc:
            raise PodSpecError(str(exc), field="spec.parent", value=str(parent)) from None
    weight = spec.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 1000:
        raise PodSpecError(f"spec.weight={weight!r}: must be an integer from 1 to 1000", field="spec.weight",
                           value=str(weight))
    pools = tuple(_pool(p, field=f"spec.pools.{i}") for i, p in enumerate(_list(spec.get("pools"), field="spec.pools")))
    return share, ShareSpec(namespaces=tuple(namespaces), parent=str(parent), weight=weight, pools=pools)
