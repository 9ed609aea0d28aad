"""Infrastructure kit shared by every service (NATS, settings, lifecycle, Kubernetes client); knows nothing of GPUs."""
