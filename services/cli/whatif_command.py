"""``gpuledger whatif``: replay a pool's own history under another policy and show the difference
(docs/whatif.md). Read-only: it reads the log from PostgreSQL in this process (found as the log
commands find it) and writes nothing there, publishes nothing. Progress goes to stderr; Ctrl-C
stops it (exit 130). Exit codes: 0 done, 1 the baseline replay differs from the log (the report
is printed) or the database is unreachable, 2 bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from services.cli import output
from services.cli.exits import DataDir, JsonOut, guarded
from services.cli.log_commands import DatabaseUrl, _parse_time, resolve_database_url, with_pool
from services.cli.output import BadInput


def whatif(
    since: Annotated[str, typer.Option("--since", help="Window start: a duration ago (30m, 2h, 7d) or an ISO time.")]
    = "1h",
    until: Annotated[str | None, typer.Option("--until", help="Window end (default: the log's last event).")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="The pool changed and measured (default: every pool).")]
    = None,
    strategy: Annotated[list[str] | None, typer.Option(
        "--strategy", help="Placement strategy to try (repeat: one alternative each).")] = None,
    preemption: Annotated[str | None, typer.Option("--preemption", help="cluster, namespace or off.")] = None,
    quota: Annotated[list[str] | None, typer.Option(
        "--quota", help="NS=TFLOPS[,VRAM]: the namespace's total request cap (repeatable).")] = None,
    nodes: Annotated[list[str] | None, typer.Option(
        "--nodes", help="+N:MODEL adds N nodes like one of that GPU model; -NAME removes a node (repeatable).")]
    = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of utilisation and waiting requests.")]
    = None,
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    as_json: JsonOut = False,
) -> None:
    """Replay a window of the log under another policy.

    Rebuilds the state at --since from the log, re-decides every intent of the window as recorded
    (the baseline, checked event for event against the log) and under each alternative, and prints
    utilisation, stranded GPU, outcomes, queue waits, preemptions, gang timeouts and the requests
    whose fate differs. Nothing is written or published."""

    def body() -> None:
        from datetime import UTC, datetime

        import msgspec

        from services.allocator.adapters.postgres import PostgresEventStore
        from services.allocator.api.whatif import changes
        from services.allocator.api.whatif.engine import Replay, whatif
        from services.allocator.api.whatif.text import render
        from services.cli.progress import Meter

        now = datetime.now(UTC)
        start = _parse_time(since, "since", now=now)
        end = _parse_time(until, "until", now=now)
        assert start is not None
        if end is not None and end <= start:
            raise BadInput(f"until ({until}) must be after since ({since})", field="until")
        if pool is not None:
            output.kube_name("pool", pool, field="pool")
        try:
            alternatives = changes.alternatives(strategies=strategy or [], preemption_scope=preemption,
                                                quotas=quota or [], node_changes=nodes or [])
        except changes.ChangeError as exc:
            raise BadInput(str(exc), field=exc.field) from None
        url = resolve_database_url(database_url, data_dir)
        replay = Replay(since=start, until=end, pool=pool, alternatives=alternatives)
        with Meter("replaying the window (log position)", total=1) as meter:
            def progress(position: int, last: int) -> None:
                meter.total = last
                meter.update(position, f"{replay.intents:,} intents")

            try:
                report = with_pool(url, lambda p: whatif(PostgresEventStore(p), replay, progress=progress))
            except changes.ChangeError as exc:
                raise BadInput(str(exc), field=exc.field) from None
        if plot is not None:
            from services.allocator.api.whatif.plot import plot as draw

            draw(report, plot)
        if as_json:
            document: dict[str, Any] = msgspec.to_builtins(report)
            output.emit_json(document)
        else:
            typer.echo(render(report))
            if plot is not None:
                typer.echo(f"plot: {plot}")
        if report.fairness.mismatches:
            raise typer.Exit(output.OTHER)

    guarded(as_json, body)


def register(app: typer.Typer) -> None:
    """Add ``whatif`` to the gpuledger app."""
    app.command("whatif")(whatif)
