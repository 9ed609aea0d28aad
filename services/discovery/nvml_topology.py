"""What NVML tells about a GPU's place in its host: NUMA node, NVLink group, isolation capabilities.

Every function takes the NVML module as a parameter (``pynvml`` in production, a fake in tests)
and treats "not supported" as a normal answer (a PCIe GPU has no NVLink; a VM may hide NUMA):

- NUMA node: ``nvmlDeviceGetMemoryAffinity(handle, n, NVML_AFFINITY_SCOPE_NODE)``, the bitmask
  of host NUMA nodes near the GPU (what ``nvidia-smi topo -m`` prints as "NUMA Affinity"); exactly
  one bit set gives the node, several or none mean unknown. Without an answer, the PCI device's
  sysfs ``numa_node``. ``nvmlDeviceGetNumaNodeId`` is not used: it is the GPU's *own* memory node
  on coherent systems (Grace Hopper) and NotSupported elsewhere (NVML capture of an H100 80GB HBM3).
- NVLink group: every enabled link (``nvmlDeviceGetNvLinkState``) joins the GPU's PCI bus id to
  the link's remote bus id (``nvmlDeviceGetNvLinkRemotePciInfo``: a peer GPU, or an NVSwitch);
  GPUs in one connected component of that graph share a group, named by the component's
  smallest GPU bus id. A GPU with no NVLink peer gets "" (no group).
- Isolation capabilities: soft and hard are TensorFusion's software limits and run on every
  NVIDIA GPU; ``partitioned`` needs MIG, which ``nvmlDeviceGetMigMode`` answers (NotSupported:
  no MIG). An NVML without that call leaves the capabilities unknown (empty).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from events.values import IsolationCapabilities

NUMA_WORDS = 16
"""64-bit words of the NUMA node mask asked for: nodes 0..1023 (``GpuSpec.numa_node`` bound)."""

MAX_LINKS = 64
"""NVLinks probed per GPU at most (NVML_NVLINK_MAX_LINKS is 18 on Hopper, 36 in newer NVML)."""

WITHOUT_MIG: IsolationCapabilities = ("shared", "soft", "hard")
WITH_MIG: IsolationCapabilities = ("shared", "soft", "hard", "partitioned")


def text(value: Any) -> str:
    """NVML strings arrive as bytes or str (by nvidia-ml-py version); NULs are dropped."""
    return (value.decode() if isinstance(value, bytes) else str(value)).rstrip("\x00")


def bus_id(raw: Any) -> str:
    """A PCI bus id in sysfs form: ``"00000000:3B:00.0"`` -> ``"0000:3b:00.0"``."""
    return text(raw).strip().lower()[-12:]


def numa_node(nvml: Any, handle: Any, pci_bus: str, *, sysfs: Path) -> int | None:
    """The host NUMA node of the GPU (module docstring), or None when unknown."""
    getter = getattr(nvml, "nvmlDeviceGetMemoryAffinity", None)
    if getter is not None:
        try:
            words = getter(handle, NUMA_WORDS, getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0))
            nodes = [w * 64 + b for w, word in enumerate(words) for b in range(64) if int(word) >> b & 1]
            if nodes:
                return nodes[0] if len(nodes) == 1 else None
        except (nvml.NVMLError, TypeError, ValueError):
            pass
    try:
        node = int((sysfs / pci_bus / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def nvlink_remotes(nvml: Any, handle: Any) -> list[str]:
    """Remote PCI bus ids of the GPU's enabled NVLinks ([] when NVLink is not supported)."""
    state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    if state is None:
        return []
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    remotes = []
    for link in range(MAX_LINKS):
        try:
            if state(handle, link) != enabled:
                continue
            remotes.append(bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
        except nvml.NVMLError:
            break  # NotSupported (no NVLink) or InvalidArgument (past the GPU's last link)
    return remotes


def interconnect_groups(links: dict[str, list[str]]) -> dict[str, str]:
    """GPU bus id -> group id, from each GPU's NVLink remote bus ids (``links``).

    Union-find over GPUs and the remotes they link to; a component with two GPUs or more is
    a group named by its smallest GPU bus id; a GPU alone in its component gets "".
    """
    parent: dict[str, str] = {}

    def root(node: str) -> str:
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for gpu, remotes in links.items():
        for remote in remotes:
            a, b = root(gpu), root(remote)
            if a != b:
                parent[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for gpu in links:
        members.setdefault(root(gpu), []).append(gpu)
    return {gpu: min(members[root(gpu)]) if len(members[root(gpu)]) > 1 else "" for gpu in links}


def isolation_capabilities(nvml: Any, handle: Any) -> IsolationCapabilities:
    """The isolation modes the GPU supports (module docstring); () when NVML cannot tell."""
    getter = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if getter is None:
        return ()
    try:
        getter(handle)
    except nvml.NVMLError as exc:
        not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
        if getattr(exc, "value", not_supported) == not_supported:
            return WITHOUT_MIG
        return ()
    return WITH_MIG
