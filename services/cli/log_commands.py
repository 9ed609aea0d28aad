"""CLI commands of the log area: ``migrate``, ``history``, ``replay --verify``.

Each finds PostgreSQL through ``--database-url``, else ``--data-dir`` (``D/endpoints.json``),
else ``GPULEDGER_DATABASE_URL``, else ``.gpuledger/endpoints.json``. Exit codes: 0 ok, 2 bad
input (``{"error", "field"}`` on stdout under ``--json``), 1 anything else (including a failed
verification).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, TypeVar

import asyncpg
import typer
from rich.console import Console
from rich.table import Table

from services.allocator.adapters import database, history
from services.allocator.adapters.postgres import PostgresEventStore
from services.allocator.adapters.verify import rebuild_only, verify
from services.allocator.ports import CorruptEventError
from services.cli import endpoints
from services.cli.output import BadInput, fail

T = TypeVar("T")

DatabaseUrl = Annotated[str | None, typer.Option("--database-url", help="PostgreSQL URL (overrides discovery).")]
DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Data dir of `gpuledger up` (its endpoints.json).")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def resolve_database_url(url: str | None, data_dir: Path | None) -> str:
    """The database to use (see the module docstring); raises BadInput naming the option."""
    try:
        found = url or endpoints.resolve(data_dir).database_url
    except endpoints.EndpointsError as exc:
        raise BadInput(str(exc), field=exc.field) from exc
    if not found:
        raise BadInput("no database URL: pass --database-url or set GPULEDGER_DATABASE_URL", field="database_url")
    try:
        database.asyncpg_dsn(found)
    except ValueError as exc:
        raise BadInput(str(exc), field="database_url") from exc
    return found


def _parse_time(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadInput(f"{field} must be an ISO-8601 time like 2026-03-01T08:00:00Z, got {value!r}",
                       field=field) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


async def _with_store(url: str, work: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
    pool = await database.create_pool(url, max_size=2)
    try:
        return await work(pool)
    finally:
        await pool.close()


def _run(as_json: bool, body: Callable[[], Any]) -> Any:
    try:
        return body()
    except BadInput as exc:
        fail(str(exc), field=exc.field, as_json=as_json)
    except (OSError, asyncpg.PostgresError, CorruptEventError) as exc:
        fail(f"{type(exc).__name__}: {exc}", field=None, as_json=as_json)


def migrate(database_url: DatabaseUrl = None, data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Upgrade the PostgreSQL schema to the newest revision (idempotent)."""

    def body() -> None:
        url = resolve_database_url(database_url, data_dir)
        database.upgrade(url)
        typer.echo(json.dumps({"migrated": True, "revision": "head"}) if as_json else "schema is at head")

    _run(as_json, body)


def history_command(
    namespace: Annotated[str | None, typer.Option(help="Only this namespace.")] = None,
    pod: Annotated[str | None, typer.Option(help="Only this pod.")] = None,
    node: Annotated[str | None, typer.Option(help="Only allocations placed on this node.")] = None,
    since: Annotated[str | None, typer.Option(help="Requested at or after this ISO-8601 time.")] = None,
    at: Annotated[str | None, typer.Option(help="Running at this ISO-8601 time (with --node: what ran there).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many rows, newest first.")] = 50,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Allocation history from the read models (one row per allocation life)."""

    def body() -> None:
        flt = history.HistoryFilter(namespace=namespace, pod=pod, node=node, since=_parse_time(since, "since"),
                                    at=_parse_time(at, "at"), limit=limit)
        url = resolve_database_url(database_url, data_dir)
        rows = [history.to_json(r) for r in asyncio.run(_with_store(url, lambda p: history.allocations(p, flt)))]
        if as_json:
            typer.echo(json.dumps(rows))
        else:
            _print_history(rows)

    _run(as_json, body)


def _short(iso: str | None) -> str:
    return "" if iso is None else iso[:16].replace("T", " ")


def _print_history(rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"allocations ({len(rows)}), times UTC")
    for column in ("namespace", "pod", "pool", "status", "node", "gpus", "tflops", "vram", "requested", "granted",
                   "released", "reason"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(r["namespace"], r["pod"], r["pool"], r["status"], r["node"], ",".join(r["gpus"]),
                      r["request"]["tflops"], r["request"]["vram"], _short(r["requested_at"]),
                      _short(r["granted_at"]), _short(r["released_at"]), r["reason"] or r["release_reason"])
    Console().print(table)


def replay(
    verify_flag: Annotated[bool, typer.Option("--verify", help="Compare with the snapshot and read models.")] = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Rebuild the state from the log; with --verify compare it with the newest snapshot and the read
    models and exit 1 on any mismatch. Prints {"events", "position", "digest", "ok"}."""

    def body() -> None:
        url = resolve_database_url(database_url, data_dir)
        check = verify if verify_flag else rebuild_only
        report = asyncio.run(_with_store(url, lambda p: check(PostgresEventStore(p))))
        ok = report.ok
        if as_json:
            out: dict[str, Any] = {"events": report.events, "position": report.position, "digest": report.digest,
                                   "ok": ok}
            if report.problems:
                out["problems"] = report.problems
            typer.echo(json.dumps(out))
        else:
            typer.echo(f"{report.events} events, position {report.position}, digest {report.digest}")
            for problem in report.problems:
                typer.echo(f"MISMATCH {problem}")
            typer.echo("ok" if ok else "verification FAILED")
        if not ok:
            raise typer.Exit(1)

    _run(as_json, body)


def register(app: typer.Typer) -> None:
    """Add ``migrate``, ``history`` and ``replay`` to the gpuledger app."""
    app.command("migrate")(migrate)
    app.command("history")(history_command)
    app.command("replay")(replay)
