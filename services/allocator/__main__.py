"""``python -m services.allocator``: settings from the environment -> bootstrap -> run until SIGTERM."""

from __future__ import annotations

import functools

from services.allocator import bootstrap, settings
from services.shared import lifecycle, logs


def main() -> None:
    """Run one allocator replica (exits 0 after a clean SIGTERM/SIGINT handover)."""
    config = settings.load()
    logs.setup(config.log_level, json=config.log_json)
    lifecycle.run_service(functools.partial(bootstrap.serve, config))


if __name__ == "__main__":
    main()
