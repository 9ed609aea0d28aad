"""The annotations a MIG-aware runtime needs to create a partitioned pod's GPU instances.

From the partitions an AllocationGranted records (one per granted GPU, in ``gpu-ids`` order):

* ``tensor-fusion.ai/partition-id``: the template (MIG profile name), what TensorFusion's PreBind
  writes (internal/scheduler/gpuresources/gpuresources.go, ``PartitionTemplateIDAnnotation``); one
  value when every GPU got the same template, else one per GPU, comma-separated in ``gpu-ids``
  order;
* ``gpuledger.io/partitions``: JSON ``[{"gpu", "template", "profile_id", "start", "end"}, ...]``,
  the GPU, NVML GPU instance profile id and placement (start slot, end slot exclusive) of each
  partition: what ``nvmlDeviceCreateGpuInstanceWithPlacement`` takes, so the runtime creates the
  very instance the ledger charged (TensorFusion leaves the slot to the node).
Pure.
"""

from __future__ import annotations

import json

from events.values import Partition
from services.podspec import keys


def partition_annotations(gpus: tuple[str, ...], partitions: tuple[Partition, ...]) -> dict[str, str]:
    """The partition annotations of a grant of ``gpus`` holding ``partitions`` (aligned); {} when none."""
    if not partitions:
        return {}
    templates = [p.template for p in partitions]
    rows = [{"gpu": gpu, "template": p.template, "profile_id": p.profile_id, "start": p.start, "end": p.end}
            for gpu, p in zip(gpus, partitions, strict=True)]
    return {
        keys.PARTITION_ID: templates[0] if len(set(templates)) == 1 else ",".join(templates),
        keys.PARTITIONS: json.dumps(rows, separators=(",", ":")),
    }
