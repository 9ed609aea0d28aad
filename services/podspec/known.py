"""Which ``tensor-fusion.ai/*`` annotations a Pod may carry: a misspelled key is refused, not ignored.

Three sets (docs/annotations.md lists them):

* :data:`READ`: every key gpuledger reads or writes (:mod:`services.podspec.keys`);
* :data:`TENSORFUSION`: every ``tensor-fusion.ai/*`` key TensorFusion defines, with its Go constant
  (TensorFusion pkg/constants/constants.go); those gpuledger does not use (:data:`UNUSED`: pricing,
  remote-vGPU workers, port allocation, feature switches, ...) pass with a note;
* anything else under ``tensor-fusion.ai/`` is refused naming the key and the closest known one
  (``tensor-fusion.ai/tflops-requst`` -> "did you mean tensor-fusion.ai/tflops-request?"):
  TensorFusion ignores it, and the pod silently got 0 TFLOPS.

Keys of other domains are not ours and pass untouched. Pure; standard library only.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from services.podspec import keys
from services.podspec.errors import PodSpecError

TENSORFUSION: dict[str, str] = {keys.key(name): constant for name, constant in (
    ("finalizer", "Finalizer"), ("managed-by", "LabelKeyOwner"), ("cluster", "LabelKeyClusterOwner"),
    ("node-class", "LabelKeyNodeClass"), ("pod-template-hash", "LabelKeyPodTemplateHash"),
    ("node-selector-hash", "LabelNodeSelectorHash"), ("component", "LabelComponent"),
    ("worker-name", "LabelWorkerName"), ("should-delete", "NodeDeletionMark"),
    ("enabled", "TensorFusionEnabledLabelKey"), ("last-sync", "LastSyncTimeAnnotationKey"),
    ("workload", "WorkloadKey"), ("gpupool", "GpuPoolKey"), ("gpu-count", "GpuCountAnnotation"),
    ("gpu-indices", "GpuIndicesAnnotation"), ("vendor", "GpuVendorAnnotation"),
    ("tflops-request", "TFLOPSRequestAnnotation"), ("vram-request", "VRAMRequestAnnotation"),
    ("tflops-limit", "TFLOPSLimitAnnotation"), ("vram-limit", "VRAMLimitAnnotation"),
    ("compute-percent-request", "ComputeRequestAnnotation"), ("compute-percent-limit", "ComputeLimitAnnotation"),
    ("workload-profile", "WorkloadProfileAnnotation"), ("inject-container", "InjectContainerAnnotation"),
    ("container-gpu-count", "ContainerGPUCountAnnotation"), ("container-gpus", "ContainerGPUsAnnotation"),
    ("is-local-gpu", "IsLocalGPUAnnotation"), ("qos", "QoSLevelAnnotation"),
    ("embedded-worker", "EmbeddedWorkerAnnotation"), ("dedicated-worker", "DedicatedWorkerAnnotation"),
    ("sidecar-worker", "SidecarWorkerAnnotation"), ("isolation", "IsolationModeAnnotation"),
    ("gpu-model", "GPUModelAnnotation"), ("gpu-ids", "GPUDeviceIDsAnnotation"),
    ("partition", "PartitionNameAnnotation"), ("partition-id", "PartitionTemplateIDAnnotation"),
    ("dedicated-gpu", "DedicatedGPUAnnotation"), ("pending-owned-workload", "SetPendingOwnedWorkloadAnnotation"),
    ("hourly-pricing", "PricingAnnotation"), ("selected-workload", "SelectedWorkloadAnnotation"),
    ("worker-pod-template", "WorkerPodTemplateAnnotation"), ("index", "PodIndexAnnotation"),
    ("workload-mode", "WorkloadModeAnnotation"), ("disable-features", "DisableFeaturesAnnotation"),
    ("host-port", "GenHostPortLabel"), ("port-name", "GenHostPortNameLabel"),
    ("port-number", "GenPortNumberAnnotation"), ("autoscale", "AutoScaleResourcesAnnotation"),
    ("autoscale-target", "AutoScaleTargetResourceAnnotation"), ("gpu-released", "GpuReleasedAnnotation"),
    ("pod-counter-key", "TensorFusionPodCounterKeyAnnotation"), ("tf-pod-count", "TensorFusionPodCountAnnotation"),
    ("used-by", "NodeUsedByTaintKey"), ("enabled-replicas", "TensorFusionEnabledReplicasAnnotation"),
    ("is-default-pool", "TensorFusionDefaultPoolKeyAnnotation"),
    ("eviction-protection", "EvictionProtectionAnnotation"), ("gang-min-members", "GangMinMembersAnnotation"),
    ("gang-timeout", "GangTimeoutAnnotation"), ("expansion-source", "KarpenterExpansionLabel"),
    ("do-not-disrupt", "SchedulingDoNotDisruptLabel"), ("node-provisioner", "ProvisionerLabelKey"),
    ("orphan", "ProvisionerMissingLabel"), ("manual-compaction", "TensorFusionPoolManualCompaction"),
    ("hardware-vendor", "AcceleratorLabelVendor"),
    ("virtualization-capabilities", "GPU virtualization capabilities annotation"),
    # earlier releases (internal/constants/constants.go): TensorFusion's own samples still carry them
    ("client-profile", "ClientProfileAnnotation (earlier releases; now workload-profile)"),
    ("replicas", "ReplicasAnnotation (earlier releases)"),
    ("generate-workload", "GenWorkloadAnnotation (earlier releases)"),
    ("no-standalone-worker-mode", "NoStandaloneWorkerModeAnnotation (earlier releases)"),
    ("auto-limits", "AutoScaleLimitsAnnotation (earlier releases)"),
    ("auto-requests", "AutoScaleRequestsAnnotation (earlier releases)"),
    ("auto-replicas", "AutoScaleReplicasAnnotation (earlier releases)"), ("gpu", "GpuKey (earlier releases)"),
)}
"""Every ``tensor-fusion.ai/*`` key TensorFusion defines -> its Go constant (pkg/constants/constants.go;
earlier releases' internal/constants/constants.go for the keys its older samples still carry)."""

READ: frozenset[str] = frozenset(
    value for value in vars(keys).values() if isinstance(value, str) and value.startswith(f"{keys.DOMAIN}/"))
"""Every ``tensor-fusion.ai/*`` key gpuledger reads or writes (the constants of services.podspec.keys)."""

UNUSED: frozenset[str] = frozenset(TENSORFUSION) - READ
"""TensorFusion keys gpuledger does not use: they pass with a note."""

_KNOWN = sorted(READ | frozenset(TENSORFUSION))


def check_keys(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The notes for ``tensor-fusion.ai/*`` keys gpuledger does not use (one per key, sorted);
    raises PodSpecError naming the first unknown key (sorted) and the closest known one."""
    ours = sorted(name for name in annotations if name.startswith(f"{keys.DOMAIN}/"))
    for name in ours:
        if name not in READ and name not in TENSORFUSION:
            raise PodSpecError(unknown_message(name), field=name, value=annotations[name])
    return tuple(f"{name}: a TensorFusion annotation ({TENSORFUSION[name]}) that gpuledger does not use; it is "
                 "ignored" for name in ours if name in UNUSED)


def unknown_message(name: str) -> str:
    """``tensor-fusion.ai/tflops-requst: not an annotation gpuledger or TensorFusion knows; did you
    mean tensor-fusion.ai/tflops-request?`` (difflib's closest known key, when one is close)."""
    prefix = f"{keys.DOMAIN}/"
    close = difflib.get_close_matches(name.removeprefix(prefix), [k.removeprefix(prefix) for k in _KNOWN], n=1,
                                      cutoff=0.6)  # the shared domain would make every key look close
    hint = f"did you mean {prefix}{close[0]}?" if close else "see docs/annotations.md for the keys"
    return (f"{name[:120]}: not an annotation gpuledger or TensorFusion knows (it would be ignored and the pod "
            f"allocated without it); {hint}")
