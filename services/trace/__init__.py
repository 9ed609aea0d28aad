"""The Alibaba GPU-sharing trace (cluster-trace-gpu-v2023 "openb"): loading, the ATC'23 placement
experiment over the pure allocation domain, its metrics and plot, and the timed replay client."""
