"""The wheel's PostgreSQL on loopback TCP: a data dir initialised once is resumed by the next start."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from services.shared.pgserver import PgServer

pytestmark = pytest.mark.integration


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Our own temporary dir (pytest's may be pruned by a concurrent session while a server runs)."""
    root = Path(tempfile.mkdtemp(prefix="gpuledger-pgtest-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_restarted_server_resumes_the_same_data_dir(tmp_path: Path) -> None:
    first = PgServer(tmp_path / "pg", durable=False).start()
    try:
        assert first.host == "127.0.0.1" and first.port > 0
        url = first.create_database("resume")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE t (v int)")
            conn.execute("INSERT INTO t VALUES (42)")
    finally:
        first.stop()
    second = PgServer(tmp_path / "pg", durable=False).start()
    try:
        with psycopg.connect(second.url("resume")) as conn:
            assert conn.execute("SELECT v FROM t").fetchall() == [(42,)]
        adopted = PgServer(tmp_path / "pg").start()
        assert adopted.port == second.port
    finally:
        second.stop()
    assert not (tmp_path / "pg" / "postmaster.pid").exists()


def test_a_durable_server_syncs_commits_and_does_not_zero_fill_new_wal_segments(tmp_path: Path) -> None:
    server = PgServer(tmp_path / "pg").start()
    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            settings = {name: conn.execute(f"SHOW {name}").fetchone()[0]  # type: ignore[index]
                        for name in ("fsync", "synchronous_commit", "full_page_writes", "wal_init_zero")}
    finally:
        server.stop()
    assert settings == {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on", "wal_init_zero": "off"}
