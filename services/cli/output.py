"""How every CLI command reports failure: exit 2 for bad input with ``{"error", "field"}`` under
``--json`` (the field names the option, argument or manifest field), exit 1 for anything else."""

from __future__ import annotations

import json
from typing import NoReturn

import typer


class BadInput(ValueError):
    """Bad user input (exit code 2); ``field`` names the option, argument or manifest field."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def fail(message: str, *, field: str | None, as_json: bool, code: int | None = None) -> NoReturn:
    """Print the error (JSON on stdout, or text on stderr) and exit with ``code``.

    ``code`` defaults to 2 when ``field`` is given (bad input) and 1 otherwise. The JSON carries
    ``field`` whenever it is not None.
    """
    if as_json:
        typer.echo(json.dumps({"error": message} if field is None else {"error": message, "field": field}))
    else:
        typer.echo(f"error: {message}" + (f" (field: {field})" if field else ""), err=True)
    raise typer.Exit(code if code is not None else (2 if field is not None else 1))
