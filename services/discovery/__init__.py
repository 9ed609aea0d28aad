"""Node discovery: GPU inventory from Kubernetes (GFD labels), NVML or a file, published as intents.

Sources: ``kubernetes`` (watch Nodes), ``nvml`` (node agent), ``static`` (YAML / Alibaba CSV).
Entry points: :func:`services.discovery.service.run_discovery`, :func:`services.discovery.static.load_inventory`,
``python -m services.discovery`` and ``gpuledger discovery``.
"""
