"""Every query of docs/sql.md, run verbatim against a database populated by appending a known story
(tests/contract/scenario.py), with the answers worked out by hand from that story."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from services.allocator.adapters import database
from tests.contract import scenario
from tests.integration.log.logged import logged_database

pytestmark = pytest.mark.integration
DOC = Path(__file__).resolve().parents[3] / "docs" / "sql.md"
Rows = list[tuple[Any, ...]]


def doc_queries() -> dict[int, str]:
    """``{number: sql}`` for each ``### N. title`` section's sql block."""
    text = DOC.read_text()
    found = re.findall(r"^### (\d+)\. .*?\n```sql\n(.*?)```", text, flags=re.M | re.S)
    return {int(n): sql for n, sql in found}


def run(url: str, sql: str) -> Rows:
    with psycopg.connect(database.asyncpg_dsn(url)) as conn:
        rows: Rows = []
        for statement in (s for s in sql.split(";\n") if s.strip()):
            cur = conn.execute(statement)  # type: ignore[call-overload]
            rows = cur.fetchall() if cur.description else []
        return rows


@pytest.fixture(scope="module")
def populated(postgres_admin_url: str, postgres_template: str) -> str:
    """A database holding the scenario story, appended one intent per transaction."""
    return logged_database(postgres_admin_url, postgres_template, scenario.story())


def _gpu_hours(rows: Rows) -> None:
    by_ns = {(r[0], str(r[1])): r for r in rows}
    assert by_ns[("team-b", "2026-03-01")][2] == Decimal("0.90")  # 2 GPUs x 27 min
    assert by_ns[("team-b", "2026-03-01")][3] == Decimal("90.0")  # 100 TFLOPS x 2 x 0.45 h
    assert by_ns[("team-a", "2026-03-01")][2] > Decimal("15.0")  # a and c still run: up to midnight


def _usage(rows: Rows) -> None:
    assert [(r[0], r[1], r[2], r[4], r[7]) for r in rows] == [
        ("default", "A100", 2, Decimal("50.0000000000000000"), 1),
        ("default", "H100", 2, Decimal("300.0000000000000000"), 1)]


def _waits(rows: Rows) -> None:
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [("default", "medium", 1, 26 * 60.0)]


def _why(rows: Rows) -> None:
    assert [(r[1], r[3], r[4]) for r in rows] == [("allocation_queued", "capacity", "no GPU has 300 TFLOPS free")]


def _node_at(rows: Rows) -> None:
    assert [(r[0], r[1], r[2]) for r in rows] == [("team-b", "pod-b", ["n2-gpu0", "n2-gpu1"])]


def _quota(rows: Rows) -> None:
    top = rows[0]
    assert (top[0], top[1], top[2], top[4], top[5]) == ("team-a", 2, Decimal("350.0000000000000000"),
                                                       Decimal("1000.0000000000000000"), Decimal("35.0"))


def _resizes(rows: Rows) -> None:
    assert [(r[1], r[3], r[4], r[5], r[6]) for r in rows] == [
        ("allocation_resized", "pod-a", 50_000, 5 * scenario.GIB, 100_000)]


def _per_hour(rows: Rows) -> None:
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [(datetime(2026, 3, 1, 8, tzinfo=UTC), 4, 1, 5)]


def _rejections(rows: Rows) -> None:
    assert [(r[0], r[1], r[4]) for r in rows] == [("too_big", 1, "bigger than any GPU")]


def _by_type(rows: Rows) -> None:
    counts = {r[0]: r[1] for r in rows}
    assert counts == {"allocation_granted": 4, "allocation_released": 2, "node_registered": 2, "quota_set": 1,
                      "allocation_queued": 1, "allocation_rejected": 1, "allocation_resized": 1}
    assert max(r[3] for r in rows) == 12


def _no_preemptions(rows: Rows) -> None:
    assert rows == []  # the story has none; tests/integration/log/test_preemption_sql.py has one


def _idle_nodes(rows: Rows) -> None:
    """n2 waited 3 minutes for b, n1 2 minutes for a; b's release and c's grant from the queue on n2
    were one decision (no gap), and d came and went on n1 while a held it."""
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("n2", "default", timedelta(minutes=3), 1), ("n1", "default", timedelta(minutes=2), 1)]
    assert rows[0][5] == scenario.T0


CHECKS: dict[int, Callable[[Rows], None]] = {1: _gpu_hours, 2: _usage, 3: _waits, 4: _why, 5: _node_at,
                                             6: _quota, 7: _resizes, 8: _per_hour, 9: _rejections, 10: _by_type,
                                             11: _no_preemptions, 12: _idle_nodes}


def test_the_doc_has_every_query_we_check() -> None:
    assert sorted(doc_queries()) == sorted(CHECKS)


@pytest.mark.parametrize("number", sorted(CHECKS))
def test_doc_query_answers_from_a_populated_log(populated: str, number: int) -> None:
    CHECKS[number](run(populated, doc_queries()[number]))


@pytest.mark.parametrize(("number", "index"), [(4, "events_pkey"), (7, "ix_events_resize")])
def test_doc_queries_on_events_can_use_an_index(populated: str, number: int, index: str) -> None:
    """``events`` has no index on ``type``: queries 4 and 7 must reach events by index, not by scanning
    the log (seq scans are disabled so that the tiny test tables do not make a scan look cheaper)."""
    sql = doc_queries()[number]
    with psycopg.connect(database.asyncpg_dsn(populated)) as conn:
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql).fetchall())  # type: ignore[call-overload]
    assert index in plan and "Seq Scan on events" not in plan, plan
