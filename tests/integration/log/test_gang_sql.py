"""The gang queries of docs/sql.md ("Gangs", migration 0005's views), run verbatim against a log
appended from a gang story decided by the domain: a gang placed then degraded, a gang timed out."""

from __future__ import annotations

import re

import pytest

from events import intents as it
from services.allocator.ports import DecidedIntent
from tests.integration.log.logged import logged_database
from tests.integration.log.test_history_sql import DOC, Rows, run
from tests.unit.allocator.builders import Cluster, Gi, a_gpu
from tests.unit.allocator.test_gang import member

pytestmark = pytest.mark.integration


def gang_queries() -> dict[str, str]:
    """``{"G1": sql, ...}`` for each ``### Gn. title`` section's sql block."""
    found = re.findall(r"^### (G\d+)\. .*?\n```sql\n(.*?)```", DOC.read_text(), flags=re.M | re.S)
    return dict(found)


@pytest.fixture(scope="module")
def populated(postgres_admin_url: str, postgres_template: str) -> str:
    """A database holding the gang story, one intent per append, then the timeout."""
    c = Cluster()
    batches: list[DecidedIntent] = []

    def send(intent: it.AnyIntent) -> None:
        batches.append(DecidedIntent(intent_id=intent.intent_id, stream_seq=0, events=tuple(c.send(intent))))

    for n in ("n0", "n1"):
        gpus = tuple(a_gpu(f"{n}-g{g}", 100, 10 * Gi) for g in range(2))
        send(it.RegisterNode(intent_id=n, node=n, pool="p", gpus=gpus))
    for i in range(3):
        send(it.RequestAllocation(intent_id=f"t{i}", spec=member("trainer", i, quorum=3)))
    c.tick(60)
    send(it.ReleaseAllocation(intent_id="r1", allocation_id="trainer-1"))
    send(it.RequestAllocation(intent_id="l0", spec=member("late", 0, quorum=2, timeout_s=60)))
    c.tick(61)
    send(it.CheckHeartbeats(intent_id="h"))

    return logged_database(postgres_admin_url, postgres_template, batches)


def test_the_doc_has_the_gang_queries() -> None:
    assert sorted(gang_queries()) == ["G1", "G2"]


def test_g1_one_row_per_gang_placement(populated: str) -> None:
    rows: Rows = run(populated, gang_queries()["G1"])
    assert [(r[0], r[2], r[3], r[4], r[5], r[6]) for r in rows] == [("team-a/trainer", 3, 3, ["n0", "n1"], 2, 1)]


def test_g2_timed_out_gangs_and_their_waiting_members(populated: str) -> None:
    rows = run(populated, gang_queries()["G2"])
    assert [(r[0], r[2], r[3], r[5]) for r in rows] == [("team-a/late", 2, 1, ["late-0"])]
    assert rows[0][4] == "gang team-a/late timed out after 60 s: 1 of 2 members present, quorum 2"
