"""Where a running stack is: ``D/endpoints.json`` written by ``gpuledger up``, or the environment.

Resolution order for a command: an explicit ``--data-dir`` (its endpoints.json must exist), then
``GPULEDGER_NATS_URL`` / ``GPULEDGER_DATABASE_URL`` / ``GPULEDGER_API_URL``, then the default data
dir's endpoints.json. The allocator's HTTP API token (optional) comes from ``GPULEDGER_API_TOKEN``,
else the file ``GPULEDGER_API_TOKEN_FILE`` names, else endpoints.json's ``api_token``, else the
file ``D/secrets/api-token`` that ``gpuledger up`` generates (or ``D/api-token``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from services.shared.settings import DATABASE_URL_ENV, NATS_URL_ENV

API_URL_ENV = "GPULEDGER_API_URL"
API_TOKEN_ENV = "GPULEDGER_API_TOKEN"
API_TOKEN_FILE_ENV = "GPULEDGER_API_TOKEN_FILE"
API_TOKEN_SECRET = "api-token"
"""Name of the token file ``gpuledger up`` generates under ``D/secrets/`` (mode 0600)."""
API_TOKEN_FILES = (f"secrets/{API_TOKEN_SECRET}", "api-token", "api_token")

DEFAULT_DATA_DIR = Path(".gpuledger")
"""Data dir of ``gpuledger up`` when ``--data-dir`` is not given (relative to the working dir)."""

ENDPOINTS_FILE = "endpoints.json"


class EndpointsError(ValueError):
    """No stack could be located; the message says what to pass. ``field`` names the option."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class Endpoints(msgspec.Struct, kw_only=True):
    """URLs of a stack: ``nats_url``, ``database_url``, ``allocator_http`` (the HTTP API: a reader,
    ``gpuledger api``), ``writer_http`` (the writer's probes and metrics), ``webhook_https`` ("" unknown);
    ``source`` says where they were found (a path or the environment; not written)."""

    nats_url: str = ""
    database_url: str = ""
    allocator_http: str = ""
    writer_http: str = ""
    webhook_https: str = ""
    api_token: str = ""
    source: str = ""


def write(data_dir: Path, endpoints: Endpoints) -> Path:
    """Write ``data_dir/endpoints.json`` atomically with mode 0600 (its URLs carry passwords)."""
    path = data_dir / ENDPOINTS_FILE
    tmp = path.with_suffix(".tmp")
    written = {k: v for k, v in msgspec.to_builtins(endpoints).items() if k != "source" and (v or k != "api_token")}
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as handle:
        handle.write(json.dumps(written, indent=2) + "\n")
    tmp.replace(path)
    return path


def read(data_dir: Path) -> Endpoints:
    """Read ``data_dir/endpoints.json``; raises EndpointsError when missing or malformed."""
    path = data_dir / ENDPOINTS_FILE
    try:
        found = msgspec.json.decode(path.read_bytes(), type=Endpoints)
    except FileNotFoundError:
        raise EndpointsError(f"{path} not found: is `gpuledger up --data-dir {data_dir}` running?",
                             field="data_dir") from None
    except msgspec.DecodeError as exc:
        raise EndpointsError(f"{path} is not valid: {exc}", field="data_dir") from exc
    found.source = str(path)
    if not found.api_token:
        found.api_token = _token_file(data_dir)
    return found


def _token_file(data_dir: Path) -> str:
    for name in API_TOKEN_FILES:
        try:
            return (data_dir / name).read_text().strip()
        except OSError:
            continue
    return ""


def resolve(data_dir: Path | None, environ: dict[str, str] | None = None) -> Endpoints:
    """The stack to talk to (see the module docstring); raises EndpointsError when none is found."""
    env = dict(os.environ) if environ is None else environ
    found = _locate(data_dir, env)
    if env.get(API_TOKEN_ENV):
        found.api_token = env[API_TOKEN_ENV]
    elif env.get(API_TOKEN_FILE_ENV):
        try:
            found.api_token = Path(env[API_TOKEN_FILE_ENV]).read_text().strip()
        except OSError as exc:
            raise EndpointsError(f"{API_TOKEN_FILE_ENV}={env[API_TOKEN_FILE_ENV]}: {exc.strerror}",
                                 field=API_TOKEN_FILE_ENV) from None
    return found


def _locate(data_dir: Path | None, env: dict[str, str]) -> Endpoints:
    if data_dir is not None:
        return read(data_dir)
    if env.get(NATS_URL_ENV) or env.get(DATABASE_URL_ENV) or env.get(API_URL_ENV):
        return Endpoints(nats_url=env.get(NATS_URL_ENV, ""), database_url=env.get(DATABASE_URL_ENV, ""),
                         allocator_http=env.get(API_URL_ENV, ""), source="the environment")
    if (DEFAULT_DATA_DIR / ENDPOINTS_FILE).is_file():
        return read(DEFAULT_DATA_DIR)
    raise EndpointsError(
        f"no stack found: no {DEFAULT_DATA_DIR / ENDPOINTS_FILE} here; start `gpuledger up`, pass --data-dir, or "
        f"set {API_URL_ENV} / {NATS_URL_ENV} / {DATABASE_URL_ENV}", field="data_dir")
