"""Annotation and label keys read and written by admission (TensorFusion names, domain tensor-fusion.ai).

Every ``tensor-fusion.ai/*`` key lives here and nowhere else; gpuledger's own keys use the
``gpuledger.io`` domain. Source: TensorFusion ``pkg/constants/constants.go``.
"""

from __future__ import annotations

DOMAIN = "tensor-fusion.ai"
"""TensorFusion's default annotation domain (``DomainPrefix.DomainSuffix``)."""


def key(name: str) -> str:
    """``key("gpu-count") == "tensor-fusion.ai/gpu-count"``."""
    return f"{DOMAIN}/{name}"


ENABLED = key("enabled")
TFLOPS_REQUEST = key("tflops-request")
TFLOPS_LIMIT = key("tflops-limit")
VRAM_REQUEST = key("vram-request")
VRAM_LIMIT = key("vram-limit")
PERCENT_REQUEST = key("compute-percent-request")
PERCENT_LIMIT = key("compute-percent-limit")
GPU_COUNT = key("gpu-count")
GPU_INDICES = key("gpu-indices")
VENDOR = key("vendor")
GPU_MODEL = key("gpu-model")
POOL = key("gpupool")
QOS = key("qos")
IS_LOCAL_GPU = key("is-local-gpu")
ISOLATION = key("isolation")
SIDECAR_WORKER = key("sidecar-worker")
PARTITION_ID = key("partition-id")
DEDICATED_GPU = key("dedicated-gpu")
WORKLOAD_PROFILE = key("workload-profile")
INJECT_CONTAINER = key("inject-container")
ENABLED_REPLICAS = key("enabled-replicas")
AUTOSCALE = key("autoscale")
AUTOSCALE_TARGET = key("autoscale-target")
WORKER_POD_TEMPLATE = key("worker-pod-template")
GANG_ENABLED = key("gang-enabled")
GANG_MIN_MEMBERS = key("gang-min-members")
GANG_TIMEOUT = key("gang-timeout")
GANG_DESIRED = key("gang-desired-members")
GANG_REQUIRED = key("gang-required-members")
GANG_GROUP_KEY = key("gang-group-key")
CONTAINER_GPU_COUNT = key("container-gpu-count")
WORKLOAD = key("workload")
GPU_IDS = key("gpu-ids")
CONTAINER_GPUS = key("container-gpus")
"""Written at bind: JSON ``{"container": ["gpu", ...]}`` from CONTAINER_GPU_COUNT (ContainerGPUsAnnotation)."""
EFFECTIVE_HARD_SM_PERCENT = key("effective-hard-sm-percent")
"""Written at bind for hard isolation with a TFLOPS limit: whole percent of the GPU's SMs, 1..100."""
EMBEDDED_WORKER = key("embedded-worker")
EVICTION_PROTECTION = key("eviction-protection")
"""Go duration (``30m``, ``1h``): the pod may not be preempted for this long. Also the
AllocationSpec.attributes key carrying the annotation's original string to the preemption rules."""

RESOURCE_KEYS: tuple[str, ...] = (
    TFLOPS_REQUEST,
    TFLOPS_LIMIT,
    VRAM_REQUEST,
    VRAM_LIMIT,
    PERCENT_REQUEST,
    PERCENT_LIMIT,
)
"""The six per-GPU resource annotations, written back only when non-zero."""

ALLOCATION_ID_LABEL = "gpuledger.io/allocation-id"
"""Label the webhook puts on every admitted pod: the allocation id (pod UID, or the review UID)."""

SCHEDULING_GATE = "gpuledger.io/allocation"
"""Pod scheduling gate held until the binder has pinned the pod to its granted node."""

NO_SOFT_LIMITER_VENDORS: frozenset[str] = frozenset({"amd", "hygon", "metax"})
"""Vendors without a soft limiter: isolation=soft is refused (TensorFusion vendors.go)."""

NATIVE_GPU_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu",)
"""Native device-plugin resources migrated into gpu-count (ProviderConfig inUseResourceNames)."""

RESOURCE_VENDORS: dict[str, str] = {
    "nvidia.com/gpu": "NVIDIA",
    "amd.com/gpu": "AMD",
    "huawei.com/Ascend910": "Ascend",
}
"""Vendor implied by a native GPU resource name (TensorFusion constants/vendors.go)."""

PARTITIONS = "gpuledger.io/partitions"
"""Written at bind for isolation partitioned: JSON list of each GPU's partition (GPU, template,
NVML profile id, start and end slot); services/admission/partition_annotations.py."""

AUTOSCALING_CONFIG = "gpuledger.io/autoscaling-config"
"""Attribute carrying the WorkloadProfile's ``autoScalingConfig`` as JSON to the autoscaler."""
