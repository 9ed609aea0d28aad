"""How every CLI command reports: exit codes, errors, human units and tables.

Exit codes (every command): 0 done or granted, 1 anything else (stack unreachable, timeout, server
error), 2 bad input (``{"error", "field"}`` on stdout under ``--json``; the field names the option,
argument or manifest field), 3 queued, 4 rejected, 130 interrupted (Ctrl-C), 141 stdout's reader
went away (services.cli.main.run).

Text output shows quantities in human units (``1,788.7 TFLOPS``, ``80 GiB``, ``50 %``, ``unset``;
rendered by events.quantity's formatters, the same as the allocator's messages);
JSON keeps the canonical Kubernetes quantity strings. Tables are Rich tables on a terminal and
tab-separated full values (one header line) through a pipe, so ``| cut -f3`` and ``| column -t``
work. This module imports only the standard library and Typer at load (events.quantity when a
quantity is printed): it is paid by every command.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

import typer

OK, OTHER, BAD_INPUT, QUEUED, REJECTED = 0, 1, 2, 3, 4
"""Exit codes of every gpuledger command (see the module docstring)."""

OUTCOME_CODES = {"allocation_granted": OK, "granted": OK, "allocation_queued": QUEUED, "queued": QUEUED,
                 "allocation_rejected": REJECTED, "rejected": REJECTED, "intent_rejected": BAD_INPUT}
"""Exit code of ``submit`` per outcome type (event tag or allocation status)."""

EXIT_CODES_HELP = ("Exit codes: 0 done/granted, 1 other failure, 2 bad input, 3 queued, 4 rejected, 130 interrupted "
                   "(Ctrl-C), 141 output pipe closed.")


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


def kube_name(kind: str, text: str, *, field: str) -> str:
    """``text`` when it is a valid Kubernetes ``kind`` name (``namespace``: a DNS label; ``pool``
    and ``share``: a DNS subdomain; events.names, the rule the allocator applies); else BadInput
    naming ``field``."""
    from events import names  # imported when used: --help stays fast

    message = names.problem("namespace" if kind == "namespace" else "share" if kind == "share" else "pool", text,
                            field=field)
    if message is not None:
        raise BadInput(message, field=field)
    return text


def emit_json(value: Any) -> None:
    """Print ``value`` as one JSON document on stdout."""
    typer.echo(json.dumps(value))


_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(text: str | int | float | None) -> Decimal | None:
    """A Kubernetes quantity string (``"500m"``, ``"4Gi"``, ``"5k"``, ``"10"``) as a Decimal; None when
    empty or not a quantity."""
    if text is None or text == "":
        return None
    raw = str(text).strip()
    if not raw.isascii():  # Decimal reads full-width digits ("１０"); Kubernetes does not
        return None
    for table in (_BINARY, _DECIMAL):
        for suffix, factor in table.items():
            if raw.endswith(suffix):
                return _decimal(raw[: -len(suffix)], factor)
    if raw.endswith("m"):
        return _decimal(raw[:-1], Decimal("0.001"))
    return _decimal(raw, 1)


def _decimal(number: str, factor: int | Decimal) -> Decimal | None:
    try:
        return Decimal(number) * factor
    except InvalidOperation:
        return None


def tflops(text: str | None, *, unset: bool = False) -> str:
    """``"1788682500m"`` -> ``"1,788,682.5 TFLOPS"``; ``"5k"`` -> ``"5,000 TFLOPS"``. With ``unset``, zero
    or empty reads ``unset`` (a limit that was not given). Rendered by events.quantity.tflops_text,
    the formatter of every message in TFLOPS."""
    value = quantity(text)
    if value is None or (unset and value == 0):
        return "unset" if unset else "-"
    from events.quantity import tflops_text  # imported when used: --help stays fast

    return tflops_text(int(value * 1000), places=1)


def vram(text: str | None, *, unset: bool = False) -> str:
    """``"85899345920"`` or ``"80Gi"`` -> ``"80 GiB"``; below 1 GiB in MiB (events.quantity.vram_text).
    ``unset`` as for tflops."""
    value = quantity(text)
    if value is None or (unset and value == 0):
        return "unset" if unset else "-"
    from events.quantity import vram_text

    return vram_text(int(value), places=1)


def percent(text: str | None) -> str:
    """A compute share (``"50"``, ``"12500m"``) as ``"50 %"`` / ``"12.5 %"``; ``-`` when absent."""
    value = quantity(text)
    if value is None:
        return "-"
    from events.quantity import percent_text

    return percent_text(int(value * 1000))


def request_text(resources: dict[str, Any] | None, *, unset: bool = False) -> str:
    """``{"tflops", "vram", "compute_percent"?}`` as ``"10 TFLOPS, 4 GiB"`` or ``"50 %, 4 GiB"``."""
    resources = resources or {}
    share = resources.get("compute_percent")
    first = percent(share) if share else tflops(resources.get("tflops"), unset=unset)
    second = vram(resources.get("vram"), unset=unset)
    if unset and first == "unset" and second == "unset":
        return "unset"
    return f"{first}, {second}"


def usage(used: Decimal | None, capacity: Decimal | None) -> str:
    """``used / capacity`` as a percentage string (``"37.5 %"``); ``-`` without capacity."""
    if used is None or not capacity:
        return "-"
    from events.quantity import share_text

    return share_text(int(used * 1000), int(capacity * 1000)) or "-"


def is_terminal() -> bool:
    """True when stdout is a terminal (tables are drawn), False through a pipe or into a file."""
    return sys.stdout.isatty()


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str = "") -> None:
    """Print ``rows`` under ``columns``. Through a pipe: tab-separated full values, one header line
    (no title). On a terminal: a Rich table when every cell fits on one line in the terminal's
    width, else one record per row (``column: value`` lines, like psql's expanded mode), so that
    nothing is squeezed or cut at 80 columns."""
    cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
    if not is_terminal():
        typer.echo("\t".join(columns))
        for row in cells:
            typer.echo("\t".join(cell.replace("\t", " ").replace("\n", " ") for cell in row))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    widths = [max([len(column), *(len(row[i]) for row in cells)]) for i, column in enumerate(columns)]
    if sum(widths) + 3 * len(columns) > console.width:
        if title:
            console.print(title, style="bold", markup=False)
        for row in cells:
            console.print()
            lines(list(zip(columns, row, strict=False)))
        return
    grid = Table(title=title or None, show_edge=False, pad_edge=False, expand=False)
    for column in columns:
        grid.add_column(column, no_wrap=True)
    for row in cells:
        grid.add_row(*row)
    console.print(grid)


def lines(pairs: Sequence[tuple[str, Any]]) -> None:
    """Print ``label: value`` lines, labels aligned (a record, e.g. ``nodes show``)."""
    width = max((len(label) for label, _ in pairs), default=0)
    for label, value in pairs:
        typer.echo(f"{label + ':':<{width + 1}} {value}")


def device_lines(plan: Any) -> list[str]:
    """Text of a device plan (``device`` of an allocation or of ``simulate``): one line per
    container group with its devices and limits, then the RuntimeClass; [] without a plan."""
    if not isinstance(plan, dict):
        return []
    if plan.get("enforcement") == "tensor-fusion":
        return ["device: enforcement tensor-fusion (TensorFusion's runtime reads the pod's annotations)"]
    note = " (each GPU is seen whole: its fraction is not enforced)" if plan.get("enforcement") == "none" else ""
    out = [f"device: enforcement {plan.get('enforcement')}, runtimeClassName {plan.get('runtime_class') or '-'}{note}"]
    for group in plan.get("containers") or []:
        env = group.get("env") or {}
        limits = [f"{k}={v}" for k, v in env.items() if k.startswith("CUDA_DEVICE_") and "CACHE" not in k
                  and not k.startswith("CUDA_DEVICE_SM_LIMIT_")]  # each device's copy of CUDA_DEVICE_SM_LIMIT
        name = group.get("container")
        out.append(f"  container {'(every container)' if name == '*' else name}: "
                   f"NVIDIA_VISIBLE_DEVICES={env.get('NVIDIA_VISIBLE_DEVICES', '')}"
                   + (f"; {', '.join(limits)}" if limits else ""))
    out.extend(f"  problem: {p}" for p in plan.get("problems") or [])
    return out
