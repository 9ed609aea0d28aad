"""The Alibaba openb trace for benchmarks: re-exports :mod:`services.trace.openb` (its home)."""

from services.trace.openb import DATA, NODES_CSV, PODS_CSV, nodes, pods, trace_pods

__all__ = ["DATA", "NODES_CSV", "PODS_CSV", "nodes", "pods", "trace_pods"]
