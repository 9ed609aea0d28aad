"""What a grant becomes on the pod: the devices each container sees and the limits enforced on them.

ONE pure function, :func:`device_plan`, maps a granted allocation (its spec, the granted GPUs and
partitions, the GPUs' discovery records) and the pool's ``enforcement`` mode to a
:class:`DevicePlan`: per container group, the NVML device names it may see and the environment its
GPU stack reads; the RuntimeClass; the node-side volumes. The admission webhook builds the pod's
skeleton from the plan of the *request* (:func:`device_plan` with no GPUs: every device ``void``),
the binder writes the values of the plan of the *grant*, and the allocator's read model, ``simulate``
and ``why`` show the same plan. docs/runtime.md describes the delivery; the rules:

* **Visibility** (modes ``none`` and ``hami-core``): ``NVIDIA_VISIBLE_DEVICES`` (the NVIDIA
  container toolkit's variable, read by its ``nvidia`` runtime, in legacy and CDI mode) lists the
  container's devices by NVML UUID (``GPU-<uuid>``; discovery stores UUIDs lower-cased, NVML writes
  the ``GPU-``/``MIG-`` prefix upper-case), by NVML index when discovery reported no UUID; a
  partition names its MIG device ``MIG-GPU-<uuid>/<gi>/<ci>`` (:func:`mig_device`). A container with
  no GPU gets ``void`` (the toolkit then mounts no GPU, even in a CUDA image whose own environment
  says ``all``).
* **Containers**: with ``tensor-fusion.ai/container-gpu-count`` each named container takes
  consecutive runs of the granted GPUs in container-name order (TensorFusion
  internal/scheduler/gpuresources/gpuresources.go ``allocateGPUsToContainers``), other containers
  none; without it the containers of ``tensor-fusion.ai/inject-container`` (TensorFusion's GPU
  containers; every container when the attribute is absent) share every GPU (group ``""``), the
  others see none. Init containers never see a GPU.
* **hami-core** (HAMi-core's interposer, github.com/Project-HAMi/HAMi-core, as HAMi's device plugin
  sets it up in pkg/device/nvidia): ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` for each visible device ``i``
  (whole MiB with HAMi's ``m`` suffix, rounded down, at least 1: the VRAM limit, else the request,
  else the GPU's whole VRAM), ``CUDA_DEVICE_SM_LIMIT`` and ``CUDA_DEVICE_SM_LIMIT_<i>`` for each
  visible device (whole percent 1..100, rounded up as TensorFusion's ``effectiveHardSMPercent``: the
  compute-percent limit, else the TFLOPS limit over the first GPU's capacity, else the request's;
  100 when none; HAMi-core takes a device's ``_<i>`` over the plain one, so both are set),
  ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` (one file per container group and limits in a pod-local
  emptyDir, so the processes of containers that share GPUs are accounted together, and a resized
  grant starts a fresh file: HAMi-core keeps the limits of the process that created the file),
  ``LD_PRELOAD`` of ``libvgpu.so`` from the node's
  :data:`HAMI_LIBRARY_DIR` (hostPath, read-only, type Directory: a node without it fails the pod
  instead of running it unlimited) and the node's ``ld.so.preload`` naming it mounted on
  ``/etc/ld.so.preload`` (as HAMi's device plugin: a process that clears ``LD_PRELOAD`` still loads
  it), and :data:`HAMI_FIXED`. Partitioned grants get no HAMi-core limits (MIG isolates them).
* **tensor-fusion**: no environment and no RuntimeClass; TensorFusion's node runtime reads the pod's
  annotations (:data:`TENSOR_FUSION_RUNTIME_KEYS`, docs/compatibility.md).
* **none**: visibility only: a share of a GPU sees the whole device, nothing enforces the share.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from events.values import ENFORCEMENT_BY_NAME, AllocationSpec, Enforcement, GpuSpec, Partition
from services.podspec import keys

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_DEVICE = "void"
"""The toolkit's value for "no GPU" (``none`` would still mount the driver)."""
MEMORY_LIMIT = "CUDA_DEVICE_MEMORY_LIMIT"
SM_LIMIT = "CUDA_DEVICE_SM_LIMIT"
SHARED_CACHE = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
PRELOAD = "LD_PRELOAD"

RUNTIME_CLASS = "nvidia"
"""The RuntimeClass of the NVIDIA container toolkit (the GPU Operator's name; deploy/runtime)."""
HAMI_LIBRARY_DIR = "/usr/local/vgpu"
"""Node directory holding ``libvgpu.so`` (deploy/runtime/hami-core-daemonset.yaml installs it)."""
HAMI_LIBRARY = f"{HAMI_LIBRARY_DIR}/libvgpu.so"
CACHE_DIR = "/var/run/gpuledger-vgpu"
LIBRARY_VOLUME = "gpuledger-vgpu-lib"
CACHE_VOLUME = "gpuledger-vgpu-cache"

DEVICE_DOMAIN = "device.gpuledger.io"
"""Annotations holding the container environment: ``device.gpuledger.io/<VAR>`` for every
container, ``<container>.device.gpuledger.io/<VAR>`` for one container of ``container-gpu-count``."""
ENFORCEMENT_KEY = "gpuledger.io/enforcement"
"""Annotation and spec attribute: the enforcement mode the pod was admitted with."""

TENSOR_FUSION_RUNTIME_KEYS: tuple[str, ...] = (
    keys.GPU_IDS, keys.TFLOPS_REQUEST, keys.TFLOPS_LIMIT, keys.VRAM_REQUEST, keys.VRAM_LIMIT,
    keys.PERCENT_REQUEST, keys.PERCENT_LIMIT, keys.QOS, keys.ISOLATION, keys.EFFECTIVE_HARD_SM_PERCENT,
    keys.CONTAINER_GPUS, keys.PARTITION_ID,
)
"""The pod annotations TensorFusion's node runtime (hypervisor, worker) reads for mode ``tensor-fusion``."""

MIB = 2**20
_CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A Kubernetes container name (DNS-1123 label): also valid as the first label of an annotation prefix."""

HAMI_FIXED: dict[str, str] = {"CUDA_DISABLE_CONTROL": "false", "CUDA_OVERSUBSCRIBE": "false",
                              "GPU_CORE_UTILIZATION_POLICY": "default", "CUDA_REDIRECT": HAMI_LIBRARY}
"""Switches a container could otherwise set (in ``env`` or ``envFrom``) to escape its limits, set
explicitly so a pod's own values are overridden. Read by HAMi-core (Project-HAMi/HAMi-core
src/multiprocess/multiprocess_memory_limit.c, src/libvgpu.c): ``GPU_CORE_UTILIZATION_POLICY``
(``disable`` ignores the SM limit) and ``CUDA_REDIRECT`` (the library HAMi-core's ``dlsym`` takes
``cu*`` symbols from; pointed at the real ``libcuda.so.1`` it would hand out the unhooked driver;
HAMi-core's default is this path). HAMi's conventions, which HAMi-core itself does not read (HAMi
docs/config.md; its device plugin skips the ``/etc/ld.so.preload`` mount for
``CUDA_DISABLE_CONTROL=true``): ``CUDA_DISABLE_CONTROL``, ``CUDA_OVERSUBSCRIBE``."""


class ContainerDevices(msgspec.Struct, frozen=True, kw_only=True):
    """One container group: ``container`` ("" = the containers of ``members``, every container when
    that is empty), the NVML device names it sees (empty: none) and the environment variables its
    GPU stack reads (name -> value)."""

    container: str
    devices: tuple[str, ...]
    env: dict[str, str]
    members: tuple[str, ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    """Volume mounts (Kubernetes JSON) of the mode's node-side pieces, for an enforced group."""

    def holds(self, container: str) -> bool:
        """True when ``container`` gets this group's environment."""
        if self.container:
            return self.container == container
        return not self.members or container in self.members


class DevicePlan(msgspec.Struct, frozen=True, kw_only=True):
    """What a grant becomes on the pod.

    ``annotations``: what the binder writes (every env value of every group, under
    :func:`env_annotation`); ``runtime_class``: "" to leave the pod's as is; ``volumes``
    (Kubernetes JSON) are added to the pod at admission, each group's ``mounts`` to its containers;
    ``problems``: what could not be mapped (logged; the device is then left out).
    """

    enforcement: Enforcement
    containers: tuple[ContainerDevices, ...]
    runtime_class: str = ""
    annotations: dict[str, str] = {}
    volumes: tuple[dict[str, Any], ...] = ()
    problems: tuple[str, ...] = ()

    def group_of(self, container: str) -> ContainerDevices | None:
        """The group whose environment ``container`` gets (None: it sees no GPU)."""
        for group in self.containers:
            if group.holds(container):
                return group
        return None


def env_annotation(container: str, name: str) -> str:
    """The annotation carrying variable ``name`` of group ``container`` ("" = every container)."""
    return f"{container}.{DEVICE_DOMAIN}/{name}" if container else f"{DEVICE_DOMAIN}/{name}"


def nvml_uuid(uuid: str) -> str:
    """NVML's spelling of a UUID discovery stored lower-cased: ``gpu-59a0...`` -> ``GPU-59a0...``."""
    for prefix in ("GPU-", "MIG-"):
        if uuid[:4].upper() == prefix:
            return prefix + uuid[4:]
    return uuid


def gpu_instance_id(partition: Partition) -> int | None:
    """The NVML GPU instance id of a MIG partition at its placement, or None for a placement the
    rule does not cover.

    The driver numbers GPU instances by their place in the binary tree of the GPU's 8 memory slices:
    the whole GPU is 0, halves 1-2, quarters 3-6, eighths 7-14 (``nvidia-smi mig -lgi`` on A100 and
    H100: 7g 0, 3g/4g 1-2, 2g 3-5, 1g 7-13; ``nvidia-smi -L`` of the R450/R460 drivers lists a 1g.5gb
    at slot 0 as ``MIG-GPU-<uuid>/7/0``, the name :func:`mig_device` writes). To be confirmed on
    current drivers (docs/runtime.md, "Check one node").
    """
    size, start = partition.end - partition.start, partition.start
    base = {8: 0, 4: 1, 2: 3, 1: 7}.get(size)
    if base is None or start % size:
        return None
    return base + start // size


def mig_device(gpu: GpuSpec, partition: Partition) -> str | None:
    """``MIG-GPU-<uuid>/<gi>/0``: the toolkit's name of the partition's MIG device (one compute
    instance spanning the GPU instance), or None when the GPU's UUID or the instance id is unknown."""
    gi = gpu_instance_id(partition)
    if not gpu.uuid or gi is None:
        return None
    return f"MIG-{nvml_uuid(gpu.uuid)}/{gi}/0"


def container_gpu_map(spec: AllocationSpec, gpus: tuple[str, ...]) -> tuple[dict[str, list[str]] | None, str]:
    """``({container: [gpu, ...]}, "")`` from ``container-gpu-count``, ``(None, "")`` without it,
    ``(None, why)`` when it cannot be mapped (not JSON, counts not whole numbers >= 0, a name that is
    not a container name, more GPUs than the grant).
    Containers in name order take consecutive runs of ``gpus`` (TensorFusion
    allocateGPUsToContainers); with ``gpus`` empty (the request, before a grant) every count maps
    to an empty list."""
    raw = spec.attributes.get(keys.CONTAINER_GPU_COUNT, "")
    if not raw:
        return None, ""
    try:
        counts = json.loads(raw)
    except ValueError:
        return None, f"{keys.CONTAINER_GPU_COUNT} is not JSON"
    if not isinstance(counts, Mapping) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts.values()):
        return None, f"{keys.CONTAINER_GPU_COUNT} must map container names to whole numbers >= 0"
    bad = sorted(name for name in counts if not _CONTAINER_NAME.fullmatch(name))
    if bad:
        return None, f"{keys.CONTAINER_GPU_COUNT}: {bad[0][:64]!r} is not a container name (a DNS-1123 label)"
    mapping: dict[str, list[str]] = {}
    start = 0
    for name in sorted(counts):
        if gpus and start + counts[name] > len(gpus):
            return None, f"not enough GPUs: need {counts[name]} more for container {name}"
        mapping[name] = list(gpus[start:start + counts[name]])
        start += counts[name]
    return mapping, ""


def enforcement_of(spec: AllocationSpec, pool_default: Enforcement) -> Enforcement:
    """The mode the pod was admitted with (spec attribute :data:`ENFORCEMENT_KEY`), else the pool's."""
    return ENFORCEMENT_BY_NAME.get(spec.attributes.get(ENFORCEMENT_KEY, ""), pool_default)


def _ceil_percent(numerator: int, denominator: int) -> int:
    return max(1, min(100, -(-numerator * 100 // denominator)))


def sm_percent(spec: AllocationSpec, capacity_milli_tflops: int) -> int:
    """HAMi-core's ``CUDA_DEVICE_SM_LIMIT``: whole percent 1..100 of the GPU's SMs (see module doc)."""
    for side in (spec.limit, spec.request):
        if side.compute_milli_percent:
            return _ceil_percent(side.compute_milli_percent, 100_000)
        if side.milli_tflops and capacity_milli_tflops > 0:
            return _ceil_percent(side.milli_tflops, capacity_milli_tflops)
    return 100


def memory_limit_bytes(spec: AllocationSpec, capacities: list[int]) -> int:
    """The VRAM one visible device may hold (bytes): limit, else request, else the largest capacity
    of the container's GPUs (0 when none is known)."""
    return spec.limit.vram_bytes or spec.request.vram_bytes or max(capacities, default=0)


def _hami_env(spec: AllocationSpec, group: str, count: int, devices: list[GpuSpec] | None) -> dict[str, str]:
    """HAMi-core's variables for ``count`` devices; ``devices`` None: the request (limits "").
    The shared-cache file of a grant is named by its limits (``main-10240m-25.cache``): HAMi-core
    keeps the limits of the process that created a file and only logs a later process's others, and
    the emptyDir outlives a container's restart, so a resize must start a new file."""
    env: dict[str, str] = {}
    limit = memory_limit_bytes(spec, [g.capacity.vram_bytes for g in devices or ()])
    memory = f"{max(1, limit // MIB)}m" if devices is not None and limit else ""
    sm = "" if devices is None else str(sm_percent(spec, devices[0].capacity.milli_tflops if devices else 0))
    for index in range(count):
        env[f"{MEMORY_LIMIT}_{index}"] = memory
        env[f"{SM_LIMIT}_{index}"] = sm
    env[SM_LIMIT] = sm
    cache = group or "pod"
    env[SHARED_CACHE] = f"{CACHE_DIR}/{cache}" + (f"-{memory}-{sm}.cache" if devices is not None else ".cache")
    env[PRELOAD] = HAMI_LIBRARY
    env.update(HAMI_FIXED)
    return env


def device_plan(spec: AllocationSpec, *, enforcement: Enforcement, gpus: tuple[str, ...] = (),
                partitions: tuple[Partition, ...] = (),
                records: Mapping[str, GpuSpec] | None = None) -> DevicePlan:
    """The plan of ``spec`` granted ``gpus`` (names, in ``gpu-ids`` order) and ``partitions``
    (aligned with ``gpus``, empty unless partitioned) under ``enforcement``.

    ``records`` maps GPU names to discovery's GpuSpec (UUID, index, capacity). With ``gpus`` empty
    it is the request's plan: the same groups and variable names, every device list empty,
    ``NVIDIA_VISIBLE_DEVICES`` ``void`` and every limit "" (what admission puts on the pod before a
    grant). Never raises; what cannot be mapped is left out and named in ``problems``.
    """
    records = records or {}
    if enforcement == "tensor-fusion":
        return DevicePlan(enforcement=enforcement, containers=())
    problems: list[str] = []
    mapping, why = container_gpu_map(spec, gpus)
    if why:
        problems.append(why)
        mapping = {}  # fail closed: no container sees a GPU it was not mapped to
    groups = mapping if mapping is not None else {"": list(gpus)}
    partition_of = dict(zip(gpus, partitions, strict=False)) if partitions else {}
    counts = {} if why else _request_counts(spec, mapping)
    hami = enforcement == "hami-core" and not is_partitioned(spec)
    containers: list[ContainerDevices] = []
    for group in sorted(groups):
        names = groups[group]
        devices, known = _devices(names, records, partition_of, problems)
        env = {VISIBLE_DEVICES: ",".join(devices) or NO_DEVICE}
        enforced = hami and counts.get(group, 0) > 0
        if enforced:
            env.update(_hami_env(spec, group, counts[group], known if gpus else None))
        members = tuple(n for n in spec.attributes.get(keys.INJECT_CONTAINER, "").split(",") if n) if not group else ()
        containers.append(ContainerDevices(container=group, devices=tuple(devices), env=env, members=members,
                                           mounts=_HAMI_MOUNTS if enforced else ()))
    annotations = {env_annotation(c.container, name): value for c in containers for name, value in c.env.items()}
    return DevicePlan(
        enforcement=enforcement, containers=tuple(containers), runtime_class=RUNTIME_CLASS,
        annotations=annotations, problems=tuple(problems),
        volumes=_HAMI_VOLUMES if hami and any(c.mounts for c in containers) else ())


def is_partitioned(spec: AllocationSpec) -> bool:
    """True for a request of MIG partitions (no HAMi-core limits: the hardware isolates them)."""
    return spec.isolation == "partitioned" or bool(spec.partition_template)


def _request_counts(spec: AllocationSpec, mapping: dict[str, list[str]] | None) -> dict[str, int]:
    """GPUs per group as requested (known at admission: the spec's count or container-gpu-count)."""
    if mapping is None:
        return {"": spec.gpu_count}
    raw = json.loads(spec.attributes[keys.CONTAINER_GPU_COUNT])
    return {name: int(raw[name]) for name in mapping}


def _devices(names: list[str], records: Mapping[str, GpuSpec], partition_of: Mapping[str, Partition],
             problems: list[str]) -> tuple[list[str], list[GpuSpec]]:
    devices: list[str] = []
    known: list[GpuSpec] = []
    for name in names:
        gpu = records.get(name)
        if gpu is None:
            problems.append(f"GPU {name} is unknown to discovery: left out")
            continue
        if name in partition_of:
            mig = mig_device(gpu, partition_of[name])
            if mig is None:
                problems.append(f"GPU {name}: MIG device of partition {partition_of[name].template} at slot "
                                f"{partition_of[name].start} cannot be named (no UUID or unknown placement): left out")
                continue
            devices.append(mig)
        elif gpu.uuid:
            devices.append(nvml_uuid(gpu.uuid))
        elif gpu.index is not None:
            devices.append(str(gpu.index))
        else:
            problems.append(f"GPU {name} has neither UUID nor index: left out")
            continue
        known.append(gpu)
    return devices, known


_HAMI_VOLUMES: tuple[dict[str, Any], ...] = (
    {"name": LIBRARY_VOLUME, "hostPath": {"path": HAMI_LIBRARY_DIR, "type": "Directory"}},
    {"name": CACHE_VOLUME, "emptyDir": {}},
)
_HAMI_MOUNTS: tuple[dict[str, Any], ...] = (
    {"name": LIBRARY_VOLUME, "mountPath": HAMI_LIBRARY_DIR, "readOnly": True},
    {"name": LIBRARY_VOLUME, "mountPath": "/etc/ld.so.preload", "subPath": "ld.so.preload", "readOnly": True},
    {"name": CACHE_VOLUME, "mountPath": CACHE_DIR},
)


def plan_view(plan: DevicePlan) -> dict[str, Any]:
    """The plan as JSON for the API, ``simulate`` and ``why``."""
    view: dict[str, Any] = msgspec.to_builtins(plan)
    view["containers"] = [{**c, "container": c["container"] or ",".join(c["members"]) or "*"}
                          for c in view["containers"]]
    return view
