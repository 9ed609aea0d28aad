"""Entry point of the ``gpuledger`` CLI: builds the Typer app from every area's ``register``.

Areas: ``stack`` (up, allocator, submit, status, simulate), ``lifecycle`` (release, resize, queue,
why), ``events``, ``admin`` (quota, pool, nodes), ``log`` (migrate, history, replay, sql),
``admission``, ``discovery``, ``autoscaler`` (autoscaler, recommend), ``trace``.

Start-up is kept fast: the area modules import only the standard library, Typer and the CLI's
own light modules; each command imports the services it needs when it runs (a test checks that
importing this module loads none of the heavy libraries).
Exit codes: 0 done/granted, 1 other failure (stack unreachable, timeout), 2 bad input
(``{"error", "field"}`` under ``--json``), 3 queued, 4 rejected.
"""

from __future__ import annotations

import typer

from services.cli import (
    admin_commands,
    admission_commands,
    autoscaler_commands,
    discovery_commands,
    events_command,
    lifecycle_commands,
    log_commands,
    output,
    stack_commands,
    trace_commands,
)

app = typer.Typer(
    name="gpuledger",
    help="Event-sourced GPU allocation for Kubernetes (TensorFusion-compatible). " + output.EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: rendering it with Rich costs more than the whole start-up
    add_completion=False,  # its two root options make Typer import pydantic for every sub-command
)

for _area in (stack_commands, lifecycle_commands, events_command, admin_commands, log_commands, admission_commands,
              discovery_commands, autoscaler_commands, trace_commands):
    _area.register(app)


def run() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # `python3 -m services.cli.main ...` runs the CLI from a checkout without installing it
    app(prog_name="gpuledger")
