"""Per-GPU request and limit: profile, namespace quota defaults, annotations, inheritance, dedicated GPU.

Rules: TensorFusion ``ParseTensorFusionInfo`` (TensorFusion internal/webhook/v1/tf_parser.go). Precedence,
highest first: dedicated-gpu > annotations > WorkloadProfile > quota defaults > request inherits
limit. Deviations (denied, where TensorFusion drops one value silently): a pod whose annotations
set both a TFLOPS and a compute-percent key; a request above its limit; a percent above 100; a
TFLOPS or VRAM value above the per-GPU bounds of :mod:`events.bounds` (``vram-request: 8Ei``).
"""

from __future__ import annotations

from collections.abc import Mapping

from events import bounds, quantity
from events.values import QuotaSpec, Resources
from services.podspec import keys
from services.podspec.errors import PodSpecError
from services.podspec.fields import read_quantity
from services.podspec.profile import Side

_ONE_GPU_PERCENT = 100_000
"""100 % of one GPU in milli-percent."""


def _fill_quota_defaults(request: Side, limit: Side, quota: QuotaSpec | None) -> None:
    if quota is None:
        return
    for side, defaults in ((request, quota.default_requests), (limit, quota.default_limits)):
        if defaults is not None:
            side.tflops = side.tflops or defaults.milli_tflops
            side.vram = side.vram or defaults.vram_bytes


def _check_units(annotations: Mapping[str, str]) -> None:
    tflops = [k for k in (keys.TFLOPS_REQUEST, keys.TFLOPS_LIMIT) if annotations.get(k)]
    percent = [k for k in (keys.PERCENT_REQUEST, keys.PERCENT_LIMIT) if annotations.get(k)]
    if tflops and percent:
        raise PodSpecError(
            f"{percent[0]}={annotations[percent[0]]!r} conflicts with {tflops[0]}={annotations[tflops[0]]!r}:"
            " TFLOPS and compute-percent are mutually exclusive, please specify only one",
            field=percent[0],
            value=annotations[percent[0]],
        )


def _apply_annotations(request: Side, limit: Side, annotations: Mapping[str, str], *, migrated: bool) -> None:
    tl = read_quantity(annotations, key=keys.TFLOPS_LIMIT, scale=1000, most=bounds.MAX_MILLI_TFLOPS)
    tr = read_quantity(annotations, key=keys.TFLOPS_REQUEST, scale=1000, most=bounds.MAX_MILLI_TFLOPS)
    vl = read_quantity(annotations, key=keys.VRAM_LIMIT, scale=1, most=bounds.MAX_VRAM_BYTES)
    vr = read_quantity(annotations, key=keys.VRAM_REQUEST, scale=1, most=bounds.MAX_VRAM_BYTES)
    pl = read_quantity(annotations, key=keys.PERCENT_LIMIT, scale=1000)
    pr = read_quantity(annotations, key=keys.PERCENT_REQUEST, scale=1000)
    if tl is not None:
        limit.tflops = tl
        limit.percent = 0 if migrated else limit.percent
    limit.vram = vl if vl is not None else limit.vram
    if tr is not None:
        request.tflops, request.percent = tr, 0
        limit.percent = 0 if migrated and tl is None else limit.percent
    elif request.tflops == 0:
        request.tflops = limit.tflops
        request.percent = 0 if tl is not None else request.percent
    request.vram = vr if vr is not None else (request.vram or limit.vram)
    if pl is not None:
        limit.percent = 0 if tl is not None else pl
    if pr is not None:
        request.percent = 0 if (tr is not None or tl is not None) else pr
    elif not request.tflops and not request.percent and tl is None and limit.percent:
        request.percent = limit.percent


def _check_exclusive(request: Side, limit: Side) -> None:
    for name, side, field in (
        ("request", request, keys.PERCENT_REQUEST),
        ("limit", limit, keys.PERCENT_LIMIT),
    ):
        if side.tflops and side.percent:
            raise PodSpecError(
                f"tflops- and computePercent {name} are mutually exclusive, please specify only one",
                field=field,
                value=str(side.percent / 1000),
            )


def _check_bounds(request: Side, limit: Side) -> None:
    pairs = (
        (keys.TFLOPS_REQUEST, keys.TFLOPS_LIMIT, request.tflops, limit.tflops, quantity.format_milli),
        (keys.VRAM_REQUEST, keys.VRAM_LIMIT, request.vram, limit.vram, quantity.format_bytes),
        (keys.PERCENT_REQUEST, keys.PERCENT_LIMIT, request.percent, limit.percent, quantity.format_milli),
    )
    for field, cap_field, asked, cap, show in pairs:
        if cap and asked > cap:
            raise PodSpecError(
                f"{field}={show(asked)} exceeds {cap_field}={show(cap)}: a request must not be above its limit",
                field=field,
                value=show(asked),
            )
    for field, value in ((keys.PERCENT_REQUEST, request.percent), (keys.PERCENT_LIMIT, limit.percent)):
        if value > _ONE_GPU_PERCENT:
            shown = quantity.format_milli(value)
            raise PodSpecError(f"{field}={shown}: more than one whole GPU (100)", field=field, value=shown)


def compose_resources(
    annotations: Mapping[str, str],
    *,
    profile_request: Side,
    profile_limit: Side,
    quota: QuotaSpec | None,
    migrated: bool,
    dedicated: Resources | None,
) -> tuple[Side, Side]:
    """Final per-GPU (request, limit) as Sides; raises PodSpecError naming the annotation.

    ``migrated``: native GPU limits were converted (limit percent 100 already set by the caller
    on ``profile_limit``). ``dedicated``: the model's full capacity when ``dedicated-gpu=true``;
    it replaces TFLOPS and VRAM on both sides and clears percent
    (TensorFusion's ``tf_parser.go`` kept a stale percent).
    """
    _check_units(annotations)
    request = Side(tflops=profile_request.tflops, percent=profile_request.percent, vram=profile_request.vram)
    limit = Side(tflops=profile_limit.tflops, percent=profile_limit.percent, vram=profile_limit.vram)
    _fill_quota_defaults(request, limit, quota)
    _apply_annotations(request, limit, annotations, migrated=migrated)
    _check_exclusive(request, limit)
    if dedicated is not None:
        request = Side(tflops=dedicated.milli_tflops, vram=dedicated.vram_bytes)
        limit = Side(tflops=dedicated.milli_tflops, vram=dedicated.vram_bytes)
    _check_bounds(request, limit)
    return request, limit


def to_resources(side: Side) -> Resources:
    """A composed Side as the wire value object."""
    return Resources(milli_tflops=side.tflops, vram_bytes=side.vram, compute_milli_percent=side.percent)
