"""Entry point of the ``gpuledger`` CLI: builds the Typer app from every area's ``register``.

Areas: ``stack`` (up, allocator, submit, status, simulate), ``log`` (migrate, history, replay),
``admission``, ``discovery``, ``autoscaler`` (autoscaler, recommend), ``trace``.
Exit codes: 0 success, 2 bad input (``{"error", "field"}`` under ``--json``), 1 anything else.
"""

from __future__ import annotations

import typer

from services.cli import (
    admission_commands,
    autoscaler_commands,
    discovery_commands,
    log_commands,
    stack_commands,
    trace_commands,
)

app = typer.Typer(
    name="gpuledger",
    help="Event-sourced GPU allocation for Kubernetes (TensorFusion-compatible).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

for _area in (stack_commands, log_commands, admission_commands, discovery_commands, autoscaler_commands,
              trace_commands):
    _area.register(app)


def run() -> None:
    """Console-script entry point."""
    app()
