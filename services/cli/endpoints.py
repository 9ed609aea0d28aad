"""Where a running stack is: ``D/endpoints.json`` written by ``gpuledger up``, or the environment.

Resolution order for a command: an explicit ``--data-dir`` (its endpoints.json must exist), then
``GPULEDGER_NATS_URL`` / ``GPULEDGER_DATABASE_URL``, then the default data dir's endpoints.json.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from services.shared.settings import DATABASE_URL_ENV, NATS_URL_ENV

DEFAULT_DATA_DIR = Path(".gpuledger")
"""Data dir of ``gpuledger up`` when ``--data-dir`` is not given (relative to the working dir)."""

ENDPOINTS_FILE = "endpoints.json"


class EndpointsError(ValueError):
    """No stack could be located; the message says what to pass. ``field`` names the option."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class Endpoints(msgspec.Struct, kw_only=True):
    """URLs of a stack: ``nats_url``, ``database_url``, ``allocator_http``, ``webhook_https`` ("" unknown)."""

    nats_url: str = ""
    database_url: str = ""
    allocator_http: str = ""
    webhook_https: str = ""


def write(data_dir: Path, endpoints: Endpoints) -> Path:
    """Write ``data_dir/endpoints.json`` atomically with mode 0600 (its URLs carry passwords)."""
    path = data_dir / ENDPOINTS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(json.dumps(msgspec.to_builtins(endpoints), indent=2) + "\n")
    tmp.replace(path)
    return path


def read(data_dir: Path) -> Endpoints:
    """Read ``data_dir/endpoints.json``; raises EndpointsError when missing or malformed."""
    path = data_dir / ENDPOINTS_FILE
    try:
        return msgspec.json.decode(path.read_bytes(), type=Endpoints)
    except FileNotFoundError:
        raise EndpointsError(f"{path} not found: is `gpuledger up --data-dir {data_dir}` running?",
                             field="data_dir") from None
    except msgspec.DecodeError as exc:
        raise EndpointsError(f"{path} is not valid: {exc}", field="data_dir") from exc


def resolve(data_dir: Path | None, environ: dict[str, str] | None = None) -> Endpoints:
    """The stack to talk to (see the module docstring); raises EndpointsError when none is found."""
    env = dict(os.environ) if environ is None else environ
    if data_dir is not None:
        return read(data_dir)
    if env.get(NATS_URL_ENV) or env.get(DATABASE_URL_ENV):
        return Endpoints(nats_url=env.get(NATS_URL_ENV, ""), database_url=env.get(DATABASE_URL_ENV, ""))
    if (DEFAULT_DATA_DIR / ENDPOINTS_FILE).is_file():
        return read(DEFAULT_DATA_DIR)
    raise EndpointsError(
        "no stack found: pass --data-dir or set GPULEDGER_NATS_URL and GPULEDGER_DATABASE_URL", field="data_dir")
