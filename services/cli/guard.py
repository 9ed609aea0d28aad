"""The options every stack-facing command shares (``--data-dir``, ``--json``) and :func:`guarded`,
which turns the failures of a command into its exit code and message (see services.cli.output).

Light on purpose: imported by every command module at start-up (standard library, Typer, the
endpoints and client modules only).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from services.cli import client, endpoints
from services.cli.output import BAD_INPUT, OTHER, BadInput, fail
from services.shared.settings import SettingsError

T = TypeVar("T")

DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", help="Data dir of `gpuledger up` (its endpoints.json); default ./.gpuledger or GPULEDGER_* URLs.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON (canonical quantity strings) instead of text.")]


def guarded(as_json: bool, action: Callable[[], T]) -> T:
    """Run ``action()``; bad input exits 2, an unreachable stack or any other failure exits 1, each
    with its message (and ``field`` under ``--json``)."""
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
        fail("interrupted", field=None, as_json=as_json, code=130)
    except Exception as exc:
        fail(f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc), field=None, as_json=as_json, code=OTHER)
