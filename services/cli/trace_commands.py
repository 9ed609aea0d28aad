"""CLI commands of the trace area (registered into the gpuledger app by services.cli.main)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to app."""
