"""The autoscaler: usage samples -> percentile, cron and external recommendations -> ResizeAllocation.

Pure parts: histogram, aggregator, config, recommender, recommendation, cron, view, resize, engine,
report. Adapters: sources (NATS samples, Prometheus), external (HTTP recommender), checkpoint (NATS
KV), service (``run_autoscaler``), embedded (``gpuledger up``). Upstream: TensorFusion ``internal/autoscaler``.
"""
