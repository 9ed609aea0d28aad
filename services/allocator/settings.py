"""AllocatorSettings: every tunable of the allocator service, read once from ``GPULEDGER_*`` variables.

Field ``foo`` reads ``GPULEDGER_FOO`` (services.shared.settings.load). The lease defaults give a
failover under 3 s: a standby polls every ``lease_renew_s`` and takes an expired lease, so the
worst case is ``lease_ttl_s + lease_renew_s`` plus a log catch-up.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from services.shared import settings as shared_settings
from services.shared.messaging import StreamSettings


class AllocatorSettings(msgspec.Struct, kw_only=True):
    """Allocator settings (units in the names: ``_s`` seconds).

    - ``database_url``: SQLAlchemy URL of PostgreSQL (``GPULEDGER_DATABASE_URL``), required.
    - ``nats_url``: NATS server (``GPULEDGER_NATS_URL``).
    - ``batch_size``: intents fetched and committed per transaction (group commit), >= 1.
    - ``fetch_wait_s``: how long one fetch waits for the first intent.
    - ``ack_wait_s``: JetStream redelivers an intent not acked within this time.
    - ``retry_delay_s``/``retry_max_s``: nak delay and back-off after a transient error (doubling).
    - ``lease_name``/``lease_ttl_s``/``lease_renew_s``: the writer lease (fencing epoch).
    - ``holder``: this replica's name in the lease (default: the host name); a generated suffix
      is always appended, so the identity is unique per process.
    - ``stuck_after_s``: ``/readyz`` answers 503 and ``gpuledger_stuck_seconds`` rises once the
      loop has failed this long without progress (database or NATS down, a fatal error).
    - ``ack_flush_s``: how long the leader waits for NATS to confirm its acks after a commit.
    - ``heartbeat_check_s``: period of the CheckHeartbeats intent (0 disables it).
    - ``snapshot_every``: save a snapshot after this many events since the last one (0 never).
    - ``tail_interval_s``: how often a standby reads new events from the log.
    - ``http_host``/``http_port``: the HTTP API (port 0 = any free port).
    - ``stream_replicas``/``duplicate_window_s``: JetStream stream settings.
    """

    database_url: str = ""
    nats_url: str = "nats://127.0.0.1:4222"
    batch_size: int = 256
    fetch_wait_s: float = 0.5
    ack_wait_s: float = 30.0
    retry_delay_s: float = 0.2
    retry_max_s: float = 5.0
    lease_name: str = "allocator"
    lease_ttl_s: float = 1.5
    lease_renew_s: float = 0.3
    holder: str = ""
    stuck_after_s: float = 30.0
    ack_flush_s: float = 1.0
    heartbeat_check_s: float = 10.0
    snapshot_every: int = 20_000
    tail_interval_s: float = 0.2
    http_host: str = "127.0.0.1"
    http_port: int = 8480
    stream_replicas: int = 1
    duplicate_window_s: float = 120.0
    log_level: str = "info"
    log_json: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise msgspec.ValidationError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.lease_renew_s <= 0 or self.lease_ttl_s <= self.lease_renew_s:
            raise msgspec.ValidationError(
                f"lease_ttl_s ({self.lease_ttl_s}) must exceed lease_renew_s ({self.lease_renew_s}) > 0"
            )

    @property
    def streams(self) -> StreamSettings:
        """The JetStream stream settings these values select."""
        return StreamSettings(replicas=self.stream_replicas, duplicate_window_s=self.duplicate_window_s)


def load(environ: Mapping[str, str] | None = None) -> AllocatorSettings:
    """Settings from defaults and ``GPULEDGER_*`` variables (``environ``, default os.environ);
    raises SettingsError naming a bad variable."""
    return shared_settings.load(AllocatorSettings, environ=environ)
