"""Generated secrets kept as files of mode 0600: the passwords ``gpuledger up`` makes for its
embedded nats-server and PostgreSQL, read back when the same data directory is resumed.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

MODE = 0o600
"""Owner read/write only."""


class SecretFileError(RuntimeError):
    """A secret file exists but cannot be used (unreadable, empty, not a regular file)."""


def ensure(path: Path, *, nbytes: int = 32) -> str:
    """The secret stored in ``path``, generated first when the file does not exist
    (its directory is created with mode 0700).

    A new secret is ``secrets.token_urlsafe(nbytes)`` (URL-safe: letters, digits, ``-``, ``_``;
    ``nbytes`` random bytes, 43 characters for 32) written with mode 0600 through an exclusive
    create, so two processes never keep different secrets. An existing file that others may read
    is narrowed to 0600 with a warning. Raises SecretFileError for an unusable file.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE)
    except FileExistsError:
        return _read(path)
    value = secrets.token_urlsafe(nbytes)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value


def _read(path: Path) -> str:
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        raise SecretFileError(f"{path} is not a regular file")
    if info.st_mode & 0o077:
        log.warning("secret file readable by others; narrowing to 0600", path=str(path),
                    mode=oct(stat.S_IMODE(info.st_mode)))
        path.chmod(MODE)
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretFileError(f"cannot read {path}: {exc}") from exc
    if not value:
        raise SecretFileError(f"{path} is empty: delete it to generate a new secret")
    return value
