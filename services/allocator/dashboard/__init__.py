"""The read-only web dashboard of the allocator: server-rendered pages over the live projection.

Pages (under ``/ui``): Cluster (pools and the GPU map), Queue (grant order with the current
reason), Allocation (one allocation's life from the event log), Node, Placement quality. Every
asset is served by gpuledger itself (Jinja2 templates, one CSS and one JS file; no CDN, no build
step). ``reads`` is the only module that reads projection records; ``lives`` reads an
allocation's events from the log; ``timeline`` keeps the quality series as the reader's projection
folds (it reads the log only for its one start-up backfill). docs/dashboard.md describes the pages
and the authentication.
"""

from services.allocator.dashboard.pages import build, mount

__all__ = ["build", "mount"]
