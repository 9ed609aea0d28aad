"""The wheel's PostgreSQL with a password: scram-sha-256 from initdb, a trust-era data dir moved to
the password on its next start, and creating its system user tolerates a concurrent creator."""

from __future__ import annotations

import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from services.shared import pgserver
from services.shared.pgserver import PgServer

pytestmark = pytest.mark.integration


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Our own temporary dir (pytest's may be pruned by a concurrent session while a server runs)."""
    root = Path(tempfile.mkdtemp(prefix="gpuledger-pgauth-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _refused(url: str) -> str:
    with pytest.raises(psycopg.OperationalError) as caught:
        psycopg.connect(url, connect_timeout=5).close()
    return str(caught.value)


def test_a_password_cluster_refuses_a_wrong_or_missing_password(tmp_path: Path) -> None:
    server = PgServer(tmp_path / "pg", durable=False, password="right-pw").start()
    try:
        assert not server.trusts()
        with psycopg.connect(server.url()) as conn:
            assert conn.execute("SHOW password_encryption").fetchone() == ("scram-sha-256",)
        assert "password authentication failed" in _refused(server.url().replace("right-pw", "wrong-pw"))
        assert "no password" in _refused(f"postgresql://postgres@127.0.0.1:{server.port}/postgres")
    finally:
        server.stop()


def test_a_trust_data_dir_is_moved_to_the_password_on_its_next_start(tmp_path: Path) -> None:
    old = PgServer(tmp_path / "pg", durable=False).start()
    try:
        assert old.trusts()
        psycopg.connect(old.url(), connect_timeout=5).close()
    finally:
        old.stop()
    new = PgServer(tmp_path / "pg", durable=False, password="now-pw").start()
    try:
        assert not new.trusts()
        psycopg.connect(new.url(), connect_timeout=5).close()
        assert "no password" in _refused(old.url().replace(str(old.port), str(new.port)))
    finally:
        new.stop()


def test_a_user_created_meanwhile_by_another_process_is_success(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``useradd`` exits 9 ("already exists") when another first start created the user after our
    look-up: that is success, not a crash."""
    fake = tmp_path / "bin" / "useradd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'useradd: user already exists' >&2\nexit 9\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    entry = pwd.getpwuid(0)
    lookups: list[str] = []

    def getpwnam(name: str) -> pwd.struct_passwd:
        lookups.append(name)
        if len(lookups) < 3:  # before the lock and inside it: not there yet
            raise KeyError(name)
        return entry

    monkeypatch.setattr(pgserver.pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(pgserver, "USERADD_LOCK", tmp_path / "useradd.lock")
    assert pgserver.ensure_system_user("racer") == entry
    assert lookups == ["racer"] * 3
    fake.write_text("#!/bin/sh\necho 'useradd: cannot lock /etc/passwd' >&2\nexit 1\n")
    lookups.clear()
    with pytest.raises(pgserver.PgServerError, match=r"useradd racer failed \(1\): useradd: cannot lock"):
        pgserver.ensure_system_user("racer")
