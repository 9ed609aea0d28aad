"""compose(): a Pod (+ WorkloadProfile, pool defaults, namespace quota defaults) -> AllocationSpec.

The order of evaluation and the precedence are TensorFusion's ``ParseTensorFusionInfo`` and
``Handle`` (TensorFusion internal/webhook/v1/tf_parser.go, pod_webhook.go); each deviation (a
denial where TensorFusion silently ignores or drops a value) is listed in docs/compatibility.md.
Pure: no I/O, no clock, no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events import bounds
from events.values import MAX_GPUS_PER_ALLOCATION, QOS_LEVELS, AllocationSpec, QuotaSpec, Resources
from services.podspec import keys
from services.podspec.build import Resolved, build_spec
from services.podspec.context import ComposeContext, PoolDefaults
from services.podspec.errors import PodSpecError
from services.podspec.fields import parse_int32, read_indices
from services.podspec.known import check_keys
from services.podspec.options import Options, read_options
from services.podspec.pod import NativeGpus, native_gpus
from services.podspec.profile import Profile, Side, parse_profile
from services.podspec.resources import compose_resources


def _annotations(meta: Mapping[str, Any]) -> dict[str, str]:
    raw = meta.get("annotations") or {}
    if not isinstance(raw, Mapping):
        raise PodSpecError(
            "metadata.annotations: must be a map of strings",
            field="metadata.annotations",
            value=repr(raw)[:80],
        )
    for name, value in raw.items():
        if not isinstance(value, str):
            raise PodSpecError(
                f"{name}={value!r}: annotation values must be strings",
                field=str(name),
                value=repr(value)[:80],
            )
    return {str(k): v for k, v in raw.items()}


def annotation_notes(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The notes :func:`compose` passes over silently: one per TensorFusion annotation gpuledger does
    not use (services.podspec.known). For the webhook's ``warnings`` and the CLI; () for a Pod whose
    annotations are not a map (compose names that error)."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    raw = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(raw, Mapping):
        return ()
    try:
        return check_keys({str(k): str(v) for k, v in raw.items()})
    except PodSpecError:
        return ()


def _profile(annotations: Mapping[str, str], profile: Mapping[str, Any] | None) -> Profile:
    wanted = annotations.get(keys.WORKLOAD_PROFILE, "")
    if not wanted:
        return Profile()
    if profile is None:
        raise PodSpecError(
            f"{keys.WORKLOAD_PROFILE}={wanted!r}: get workload profile({wanted}) : "
            f'workloadprofiles.tensor-fusion.ai "{wanted}" not found',
            field=keys.WORKLOAD_PROFILE,
            value=wanted,
        )
    return parse_profile(profile)


def _gpu_count(
    annotations: Mapping[str, str], prof: Profile, native: NativeGpus, indices: tuple[int, ...] | None
) -> int:
    raw = annotations.get(keys.GPU_COUNT)
    count = prof.gpu_count or native.count
    if raw is not None:
        try:
            count = parse_int32(raw)
        except ValueError as exc:
            shown = bounds.echo(raw, 80)  # a whole number beyond 32 bits is out of the documented range too
            why = f"invalid gpuCount value {shown}: must be in [1, 128]" if str(exc).startswith("outside") else (
                f"invalid gpuCount value: {exc}")
            raise PodSpecError(f"{keys.GPU_COUNT}={shown!r}: {why}", field=keys.GPU_COUNT, value=raw) from None
        if not 1 <= count <= MAX_GPUS_PER_ALLOCATION:
            raise PodSpecError(
                f"{keys.GPU_COUNT}={raw!r}: invalid gpuCount value {count}: must be in [1, 128]",
                field=keys.GPU_COUNT,
                value=raw,
            )
    if indices:
        if raw is not None and count != len(indices):
            raise PodSpecError(
                f"{keys.GPU_COUNT}={raw!r} disagrees with {keys.GPU_INDICES}="
                f"{annotations[keys.GPU_INDICES]!r} ({len(indices)} GPUs)",
                field=keys.GPU_COUNT,
                value=raw,
            )
        count = len(indices)
    count = count or 1
    if not 1 <= count <= MAX_GPUS_PER_ALLOCATION:
        field = keys.GPU_INDICES if indices else "WorkloadProfile.spec.gpuCount"
        raise PodSpecError(f"invalid gpuCount {count}: must be in [1, 128]", field=field, value=str(count))
    return count


def _dedicated(opts: Options, context: ComposeContext) -> Resources | None:
    if not opts.dedicated:
        return None
    if not opts.gpu_model:
        raise PodSpecError(
            f"{keys.DEDICATED_GPU}=true: handle dedicated GPU: dedicated GPU requires gpu-model"
            " annotation to be specified",
            field=keys.GPU_MODEL,
            value="",
        )
    capacity = context.model_capacity.get(opts.gpu_model)
    if capacity is None:
        known = sorted(context.model_capacity)
        hint = f" (known models: {', '.join(known[:8])}{', ...' if len(known) > 8 else ''})" if known else ""
        raise PodSpecError(
            f"{keys.GPU_MODEL}={opts.gpu_model!r}: handle dedicated GPU: could not find capacity"
            f" information for GPU model: {opts.gpu_model}{hint}",
            field=keys.GPU_MODEL,
            value=opts.gpu_model,
        )
    return capacity


def _qos(annotations: Mapping[str, str], prof: Profile, request: Side, limit: Side, pool: PoolDefaults) -> str:
    raw = annotations.get(keys.QOS, "")
    if raw and raw not in QOS_LEVELS:
        raise PodSpecError(f"{keys.QOS}={raw!r}: must be one of {', '.join(QOS_LEVELS)}", field=keys.QOS, value=raw)
    if raw or prof.qos:
        return raw or prof.qos
    if request.tflops and request.vram and request.tflops == limit.tflops and request.vram == limit.vram:
        return "high"
    return pool.default_qos or "medium"


def _check_not_empty(request: Side, opts: Options) -> None:
    if request.tflops or request.percent or request.vram:
        return
    if opts.isolation == "shared" or (opts.isolation == "partitioned" and opts.partition):
        return
    raise PodSpecError(
        f"tflops request is not set, please set {keys.TFLOPS_REQUEST} or/and {keys.PERCENT_REQUEST}"
        f" or/and {keys.VRAM_REQUEST} annotation on Pod",
        field=keys.TFLOPS_REQUEST,
        value="",
    )


def compose(
    pod: Mapping[str, Any],
    *,
    profile: Mapping[str, Any] | None = None,
    quota_defaults: QuotaSpec | None = None,
    pool_defaults: PoolDefaults | None = None,
    context: ComposeContext | None = None,
) -> AllocationSpec:
    """Build the allocation request of a TensorFusion pod; raises PodSpecError (bad input).

    ``pod``: Pod JSON as a dict; ``profile``: the WorkloadProfile named by ``workload-profile``
    (None when not found); ``quota_defaults``: the namespace GPUResourceQuota (only its
    ``default_requests``/``default_limits`` are used here). Per-GPU units as in events.values.
    """
    context = context or ComposeContext()
    pool_defaults = pool_defaults or PoolDefaults()
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping):
        raise PodSpecError("metadata: a Pod object needs metadata", field="metadata", value="")
    annotations = _annotations(meta)
    check_keys(annotations)
    _check_node_name(pod)
    prof = _profile(annotations, profile)
    opts = read_options(annotations, prof=prof, pool=pool_defaults, context=context)
    indices = read_indices(annotations, key=keys.GPU_INDICES, pod_name=str(meta.get("name") or ""))
    use_native = keys.GPU_COUNT not in annotations and not prof.gpu_count
    native = native_gpus(pod, resource_names=context.native_resources) if use_native else NativeGpus()
    request, limit = _resources(annotations, prof=prof, opts=opts, native=native, quota=quota_defaults, context=context)
    count = _gpu_count(annotations, prof, native, indices)
    vendor = opts.vendor or native.vendor or prof.vendor
    _check_vendor(vendor, opts.isolation)
    _check_not_empty(request, opts)
    resolved = Resolved(
        prof=prof,
        opts=opts,
        native=native,
        count=count,
        vendor=vendor,
        indices=indices or (),
        request=request,
        limit=limit,
        qos=_qos(annotations, prof, request, limit, pool_defaults),
    )
    return build_spec(pod, annotations=annotations, resolved=resolved, context=context)


def _resources(
    annotations: Mapping[str, str],
    *,
    prof: Profile,
    opts: Options,
    native: NativeGpus,
    quota: QuotaSpec | None,
    context: ComposeContext,
) -> tuple[Side, Side]:
    """Request and limit; migrated native GPU limits mean a 100 % compute limit unless shared (TensorFusion)."""
    profile_limit = Side(tflops=prof.limit.tflops, percent=prof.limit.percent, vram=prof.limit.vram)
    if native.count and opts.isolation != "shared":
        profile_limit.percent = 100_000
    return compose_resources(
        annotations,
        profile_request=prof.request,
        profile_limit=profile_limit,
        quota=quota,
        migrated=native.count > 0,
        dedicated=_dedicated(opts, context),
    )


def _check_node_name(pod: Mapping[str, Any]) -> None:
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        raise PodSpecError(
            f"spec.nodeName={node!r}: a gpuledger pod is placed by its allocation; remove spec.nodeName"
            " (use nodeSelector or nodeAffinity to restrict the nodes)",
            field="spec.nodeName",
            value=str(node),
        )


def _check_vendor(vendor: str, isolation: str) -> None:
    if isolation == "soft" and vendor.strip().lower() in keys.NO_SOFT_LIMITER_VENDORS:
        raise PodSpecError(
            f'isolation=soft is not supported for vendor "{vendor}"; set annotation '
            f"{keys.ISOLATION}=partitioned or pick another mode",
            field=keys.ISOLATION,
            value="soft",
        )
