"""Entry point of the ``gpuledger`` CLI: builds the Typer app from every area's ``register``.

Areas: ``stack`` (up, allocator, submit, status, simulate), ``lifecycle`` (release, resize, queue,
why), ``events``, ``admin`` (quota, pool, nodes), ``share`` (shares), ``defrag`` (plan), ``log`` (migrate,
history, replay, sql), ``admission``, ``discovery``, ``autoscaler`` (autoscaler, recommend), ``trace``, ``whatif``.

Start-up is kept fast: the area modules import only the standard library, Typer and the CLI's
own light modules; each command imports the services it needs when it runs (a test checks that
importing this module loads none of the heavy libraries).
Exit codes: 0 done/granted, 1 other failure (stack unreachable, timeout), 2 bad input
(``{"error", "field"}`` under ``--json``), 3 queued, 4 rejected, 130 interrupted (Ctrl-C), 141 the
reader of stdout went away (``| head``): :func:`run` maps the last two for every command, also
when they happen outside a command's own error handling (while printing its answer).
"""

from __future__ import annotations

import errno
import sys

import typer

from services.cli import (
    admin_commands,
    admission_commands,
    autoscaler_commands,
    defrag_commands,
    discovery_commands,
    events_command,
    exits,
    lifecycle_commands,
    log_commands,
    output,
    share_commands,
    stack_commands,
    trace_commands,
    whatif_command,
)

_CLICK_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
"""Click's ClickException (usage errors), found through Typer's BadParameter: Typer vendors click."""

app = typer.Typer(
    name="gpuledger",
    help="Event-sourced GPU allocation for Kubernetes (TensorFusion-compatible). " + output.EXIT_CODES_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: rendering it with Rich costs more than the whole start-up
    add_completion=False,  # its two root options make Typer import pydantic for every sub-command
)

for _area in (stack_commands, lifecycle_commands, events_command, admin_commands, share_commands, log_commands,
              admission_commands, discovery_commands, autoscaler_commands, trace_commands, defrag_commands,
              whatif_command):
    _area.register(app)


COMMAND_OPTIONS = ("--data-dir", "--json")
"""Options the commands take after their name, which a user used to global flags (kubectl's) may
type before it."""


def misplaced_option(error: Exception) -> str | None:
    """A hint for a usage error that is one of :data:`COMMAND_OPTIONS` given before the command
    (``gpuledger --data-dir D simulate pod.yaml``): it belongs after it. None for any other error."""
    option = getattr(error, "option_name", None)
    ctx = getattr(error, "ctx", None)
    if option not in COMMAND_OPTIONS or ctx is None or ctx.parent is not None:
        return None
    return f"hint: {option} is an option of each command: put it after the command (gpuledger COMMAND ... {option} ...)"


def run(prog_name: str | None = None) -> None:
    """Console-script entry point: runs ``app`` and exits with the README's codes. Click's own
    handling would exit 1 for a closed pipe (EPIPE); here a closed stdout exits 141 quietly and
    Ctrl-C 130 wherever it happens."""
    try:
        code = app(prog_name=prog_name, standalone_mode=False)
    except _CLICK_ERROR as exc:  # usage errors: message and exit 2, as click prints them
        exc.show()  # type: ignore[attr-defined]
        hint = misplaced_option(exc)
        if hint:
            typer.echo(hint, err=True)
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    except typer.Abort:  # end of input at a prompt: click's "Aborted!", exit 1
        typer.echo("Aborted!", err=True)
        sys.exit(output.OTHER)
    except KeyboardInterrupt:
        sys.exit(exits.INTERRUPTED)
    except BrokenPipeError:
        exits.pipe_closed()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        exits.pipe_closed()
    except SystemExit as exc:  # click's own EPIPE handling (help text): it wraps stdout, then exits 1
        if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            exits.pipe_closed()
        raise
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # `python3 -m services.cli.main ...` runs the CLI from a checkout without installing it
    run(prog_name="gpuledger")
