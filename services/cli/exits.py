"""The options every stack-facing command shares (``--data-dir``, ``--json``) and :func:`guarded`,
which turns the failures of a command into its exit code and message (see services.cli.output).

Light on purpose: imported by every command module at start-up (standard library, Typer, the
endpoints and client modules only).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, NoReturn, TypeVar

import typer

from services.cli import client, endpoints
from services.cli.output import BAD_INPUT, OTHER, BadInput, fail
from services.shared.settings import SettingsError

T = TypeVar("T")

PIPE_CLOSED = 141
"""Exit code when stdout's reader went away: 128 + SIGPIPE, what a shell reports for `yes | head`."""

INTERRUPTED = 130
"""Exit code after Ctrl-C (SIGINT): 128 + 2, what a shell reports for an interrupted tool."""


def pipe_closed() -> NoReturn:
    """Exit :data:`PIPE_CLOSED` quietly because stdout's reader went away: stdout is pointed at
    /dev/null first, so the interpreter's final flush cannot fail again (and print a traceback or
    exit 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # fd 1 itself: sys.stdout may be a wrapper by now
    raise SystemExit(PIPE_CLOSED) from None


DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", help="Data dir of `gpuledger up` (its endpoints.json); default ./.gpuledger or GPULEDGER_* URLs.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON (canonical quantity strings) instead of text.")]


def guarded(as_json: bool, action: Callable[[], T]) -> T:
    """Run ``action()``; bad input exits 2, an unreachable stack or any other failure exits 1, each
    with its message (and ``field`` under ``--json``); a closed stdout (the reader of a pipe left)
    exits :data:`PIPE_CLOSED` without a message."""
    try:
        return action()
    except typer.Exit:
        raise
    except BadInput as exc:
        fail(str(exc), field=exc.field, as_json=as_json, code=BAD_INPUT)
    except endpoints.EndpointsError as exc:
        fail(str(exc), field=exc.field, as_json=as_json, code=OTHER)
    except SettingsError as exc:
        fail(str(exc), field="settings", as_json=as_json, code=BAD_INPUT)
    except (client.StackUnreachable, client.Pending) as exc:
        fail(str(exc), field=None, as_json=as_json, code=OTHER)
    except client.ApiError as exc:
        bad = exc.field is not None or exc.status in (400, 404, 409, 422)
        fail(str(exc), field=exc.field if bad else None, as_json=as_json, code=BAD_INPUT if bad else OTHER)
    except KeyboardInterrupt:
        fail("interrupted", field=None, as_json=as_json, code=INTERRUPTED)
    except BrokenPipeError:  # `gpuledger nodes | head`: the reader left; stop quietly, as a SIGPIPE'd tool does
        pipe_closed()
    except Exception as exc:
        fail(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc), field=None, as_json=as_json, code=OTHER)
