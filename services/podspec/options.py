"""Scalar pod options: pool, local/remote mode, sidecar, isolation, partition, model, vendor, autoscale.

Precedence per TensorFusion (TensorFusion internal/webhook/v1/tf_parser.go): the profile's poolName, isLocalGPU and
isolation are ignored; ``sidecar-worker=true`` forces local mode. Unknown isolation values, a
pool the allocator does not know (when the caller passes ``known_pools``) and a bad
``enabled-replicas`` are denied naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import msgspec

from events import names
from events.values import ISOLATION_MODES
from services.podspec import keys
from services.podspec.context import ComposeContext, PoolDefaults
from services.podspec.errors import PodSpecError
from services.podspec.fields import parse_int32, read_bool
from services.podspec.pod import NativeGpus
from services.podspec.profile import Profile


class Options(msgspec.Struct, kw_only=True):
    """Resolved scalar options of one pod (see the module docstring for precedence)."""

    pool: str
    local: bool
    sidecar: bool
    isolation: str
    partition: str
    gpu_model: str
    vendor: str
    dedicated: bool
    enabled_replicas: int | None
    autoscale: bool
    autoscale_target: str

    def attributes(self, *, inject: str, workload: str, native: NativeGpus) -> dict[str, str]:
        """Annotations gpuledger writes back besides the resource keys (AllocationSpec.attributes)."""
        effective_sidecar = self.local and (self.sidecar or self.isolation == "hard")
        attrs = {
            keys.IS_LOCAL_GPU: str(self.local).lower(),
            keys.SIDECAR_WORKER: str(effective_sidecar).lower(),
            keys.WORKLOAD: workload,
        }
        if inject:
            attrs[keys.INJECT_CONTAINER] = inject
        if self.local and not effective_sidecar:
            attrs[keys.EMBEDDED_WORKER] = "true"
        if native.per_container:
            attrs[keys.CONTAINER_GPU_COUNT] = json.dumps(native.per_container, sort_keys=True, separators=(",", ":"))
        if self.autoscale:
            attrs[keys.AUTOSCALE] = "true"
            attrs[keys.AUTOSCALE_TARGET] = self.autoscale_target
        if self.enabled_replicas is not None:
            attrs[keys.ENABLED_REPLICAS] = str(self.enabled_replicas)
        if self.dedicated:
            attrs[keys.DEDICATED_GPU] = "true"
        return attrs


def _pool(annotations: Mapping[str, str], pool: PoolDefaults, context: ComposeContext) -> str:
    name = annotations.get(keys.POOL) or pool.name
    if not name or (context.known_pools is not None and name not in context.known_pools):
        known = "" if context.known_pools is None else f" (known pools: {_listed(context.known_pools)})"
        raise PodSpecError(f"{keys.POOL}={name!r}: gpu pool not found{known}", field=keys.POOL, value=name)
    invalid = names.problem("pool", name, field=keys.POOL)
    if invalid:
        raise PodSpecError(invalid, field=keys.POOL, value=name)
    return name


def _listed(pools: frozenset[str], most: int = 20) -> str:
    """``pools`` sorted and comma-separated, the first ``most`` and how many more."""
    names = sorted(pools)
    more = f", and {len(names) - most} more" if len(names) > most else ""
    return (", ".join(names[:most]) or "none") + more


def _isolation(annotations: Mapping[str, str]) -> str:
    raw = annotations.get(keys.ISOLATION) or "soft"
    if raw not in ISOLATION_MODES:
        raise PodSpecError(
            f"{keys.ISOLATION}={raw!r}: must be one of {', '.join(ISOLATION_MODES)}",
            field=keys.ISOLATION,
            value=raw,
        )
    return raw


def _enabled_replicas(annotations: Mapping[str, str]) -> int | None:
    raw = annotations.get(keys.ENABLED_REPLICAS)
    if raw is None:
        return None
    try:
        return parse_int32(raw)
    except ValueError as exc:
        raise PodSpecError(
            f"{keys.ENABLED_REPLICAS}={raw!r}: invalid enabledReplicas value: {exc}",
            field=keys.ENABLED_REPLICAS,
            value=raw,
        ) from None


def read_options(
    annotations: Mapping[str, str], *, prof: Profile, pool: PoolDefaults, context: ComposeContext
) -> Options:
    """Resolve the scalar options; raises PodSpecError naming the annotation and value."""
    enabled_replicas = _enabled_replicas(annotations)
    pool_name = _pool(annotations, pool, context)
    local = read_bool(annotations, key=keys.IS_LOCAL_GPU)
    sidecar = read_bool(annotations, key=keys.SIDECAR_WORKER) is True
    local = True if sidecar else (pool.local_gpu if local is None else local)
    isolation = _isolation(annotations)
    partition = annotations.get(keys.PARTITION_ID, "") if isolation == "partitioned" else ""
    if annotations.get(keys.WORKER_POD_TEMPLATE) and local:
        raise PodSpecError(
            f"{keys.WORKER_POD_TEMPLATE}: worker pod template is not supported in localGPU mode",
            field=keys.WORKER_POD_TEMPLATE,
            value=annotations[keys.WORKER_POD_TEMPLATE][:80],
        )
    autoscale = annotations.get(keys.AUTOSCALE) == "true"
    return Options(
        pool=pool_name,
        local=local,
        sidecar=sidecar or prof.sidecar_worker,
        isolation=isolation,
        partition=partition or prof.partition_template,
        gpu_model=annotations.get(keys.GPU_MODEL) or prof.gpu_model,
        vendor=annotations.get(keys.VENDOR, ""),
        dedicated=read_bool(annotations, key=keys.DEDICATED_GPU) is True,
        enabled_replicas=enabled_replicas,
        autoscale=autoscale or prof.autoscale,
        autoscale_target=(annotations.get(keys.AUTOSCALE_TARGET) or "all")
        if autoscale
        else (prof.autoscale_target or "all"),
    )
