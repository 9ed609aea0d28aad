"""gpuledger services: allocator (the single writer), admission, discovery, autoscaler, shared kit."""
