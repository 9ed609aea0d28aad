"""Admission: the TensorFusion-compatible mutating webhook, the binder and the quota/profile watches.

Entry point :func:`services.admission.wiring.run_admission`. The Pod parsing itself lives in
``services.podspec`` (pure, shared with the allocator's simulate endpoint and the CLI).
"""
