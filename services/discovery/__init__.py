"""Node discovery: GPU inventory from Kubernetes (GFD labels), NVML or a file, published as intents.

Sources: ``kubernetes`` (watch Nodes), ``nvml`` (node agent), ``static`` (YAML / Alibaba CSV).
Entry points: :func:`services.discovery.wiring.run_discovery`, :func:`services.discovery.static.load_inventory`,
``python -m services.discovery`` and ``gpuledger discovery``.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """Lazy ``services.discovery.run_discovery`` (keeps ``import services.discovery.static`` light)."""
    if name == "run_discovery":
        from services.discovery.wiring import run_discovery

        return run_discovery
    raise AttributeError(f"module 'services.discovery' has no attribute {name!r}")
