"""``gpuledger migrate``, ``history`` and ``replay --verify`` against a real database."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from services.allocator.adapters import database
from services.allocator.adapters.postgres import PostgresEventStore, PostgresLeaseStore
from services.allocator.domain import state as state_module
from services.allocator.domain.state import ClusterState, digest
from services.cli.main import app
from tests.contract import scenario
from tests.fixtures.postgres import fresh_database

pytestmark = pytest.mark.integration
runner = CliRunner()


async def _fill(url: str, *, snapshot_after: int) -> ClusterState:
    pool = await database.create_pool(url)
    try:
        lease = await PostgresLeaseStore(pool).acquire("allocator", holder="t", ttl_s=60, now=datetime.now(UTC))
        assert lease is not None
        state, store = ClusterState.empty(), PostgresEventStore(pool)
        for i, decided in enumerate(scenario.story()):
            state = scenario.fold_batch(state, [decided])
            stored = await store.append([decided], lease="allocator", epoch=lease.epoch, state=state)
            state.position = stored[-1].position
            if i == snapshot_after:
                await store.save_snapshot(state)
        return state
    finally:
        await pool.close()


def _sql(url: str, statement: str) -> None:
    with psycopg.connect(database.asyncpg_dsn(url), autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def _invoke(*args: str) -> tuple[int, dict[str, object] | list[object]]:
    result = runner.invoke(app, list(args))
    return result.exit_code, json.loads(result.stdout)


def test_migrate_creates_the_schema_on_an_empty_database(postgres_admin_url: str) -> None:
    _name, url = fresh_database(postgres_admin_url)
    code, out = _invoke("migrate", "--database-url", url, "--json")
    assert (code, out) == (0, {"migrated": True, "revision": "head"})
    _sql(url, "SELECT position, state FROM snapshots")


def test_replay_verify_passes_then_fails_on_a_tampered_read_model(database_url: str) -> None:
    state = asyncio.run(_fill(database_url, snapshot_after=4))
    code, out = _invoke("replay", "--verify", "--json", "--database-url", database_url)
    assert code == 0
    assert out == {"events": 12, "position": 12, "digest": digest(state), "ok": True}
    _sql(database_url, "UPDATE gpus SET used_milli_tflops = used_milli_tflops + 1 WHERE name = 'n1-gpu0'")
    code, out = _invoke("replay", "--verify", "--json", "--database-url", database_url)
    assert code == 1 and isinstance(out, dict) and out["ok"] is False
    assert out["problems"] == ["gpus: row 'n1-gpu0' differs in used_milli_tflops"]


def test_replay_verify_fails_on_a_snapshot_that_disagrees_with_the_log(database_url: str) -> None:
    asyncio.run(_fill(database_url, snapshot_after=2))
    _sql(database_url, "UPDATE events SET data = jsonb_set(data, '{gpus,0,capacity,milli_tflops}', '90000') "
                       "WHERE position = 1")
    code, out = _invoke("replay", "--verify", "--json", "--database-url", database_url)
    assert code == 1 and isinstance(out, dict)
    assert any("snapshot at 4" in p for p in out["problems"])  # type: ignore[union-attr]


def test_replay_verify_does_not_compare_a_snapshot_of_other_projection_rules(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The case above with the snapshot written under an older PROJECTION_VERSION: the allocator
    never resumes from such a snapshot, so it is not held against the log."""
    with monkeypatch.context() as patch:
        patch.setattr(state_module, "PROJECTION_VERSION", state_module.PROJECTION_VERSION - 1)
        asyncio.run(_fill(database_url, snapshot_after=2))
    _sql(database_url, "UPDATE events SET data = jsonb_set(data, '{gpus,0,capacity,milli_tflops}', '90000') "
                       "WHERE position = 1")
    code, out = _invoke("replay", "--verify", "--json", "--database-url", database_url)
    assert code == 1 and isinstance(out, dict) and out["problems"]
    assert not any("snapshot at" in p for p in out["problems"])  # type: ignore[union-attr]


def test_replay_stops_on_an_undecodable_event_naming_it(database_url: str) -> None:
    asyncio.run(_fill(database_url, snapshot_after=99))
    _sql(database_url, "UPDATE events SET data = '{\"type\": \"quota_set\"}' WHERE position = 3")
    code, out = _invoke("replay", "--verify", "--json", "--database-url", database_url)
    assert code == 1 and isinstance(out, dict)
    assert "position 3 (type 'quota_set')" in str(out["error"])


def test_history_filters_and_json_shape(database_url: str, tmp_path: Path) -> None:
    asyncio.run(_fill(database_url, snapshot_after=99))
    (tmp_path / "endpoints.json").write_text(json.dumps({"database_url": database_url}))
    code, rows = _invoke("history", "--namespace", "team-a", "--json", "--data-dir", str(tmp_path))
    assert code == 0 and isinstance(rows, list)
    assert [r["pod"] for r in rows] == ["pod-d", "pod-big", "pod-c", "pod-a"]  # type: ignore[index]
    a = rows[-1]
    assert a["request"] == {"tflops": "50", "vram": "5Gi"} and a["gpus"] == ["n1-gpu0"]  # type: ignore[index]
    code, rows = _invoke("history", "--node", "n2", "--at", "2026-03-01T08:35:00Z", "--json",
                         "--database-url", database_url)
    assert [r["pod"] for r in rows] == ["pod-c"]  # type: ignore[union-attr, index]
    result = runner.invoke(app, ["history", "--pod", "pod-b", "--database-url", database_url],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "pod-b" in result.stdout and "released" in result.stdout


def test_bad_input_exits_2_and_no_stack_exits_1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GPULEDGER_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out = _invoke("history", "--json")
    assert code == 1 and isinstance(out, dict) and out["field"] == "data_dir"  # no stack: not bad input
    code, out = _invoke("history", "--json", "--since", "yesterday", "--database-url", "postgresql://x/y")
    assert (code, out["field"]) == (2, "since")  # type: ignore[call-overload]
    code, out = _invoke("replay", "--json", "--database-url", "mysql://x/y")
    assert (code, out["field"]) == (2, "database_url")  # type: ignore[call-overload]


def test_work_interrupted_by_ctrl_c_is_never_reported_even_if_it_swallowed_the_cancel(database_url: str) -> None:
    """``replay --verify`` printed "ok" and then exited 130: the verification had swallowed the
    cancellation of Ctrl-C and returned. with_pool raises KeyboardInterrupt (exit 130) instead."""
    import contextlib
    import os
    import signal

    from services.cli.log_commands import with_pool

    async def swallowing(pool: object) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(3):
            with contextlib.suppress(asyncio.CancelledError):  # work that ignores its cancellation (the cause)
                await asyncio.sleep(0.5)
        return "ok"

    with pytest.raises(KeyboardInterrupt):
        with_pool(database_url, swallowing)
