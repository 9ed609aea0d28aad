"""The one place where the allocator loop decides what a failure means.

Every exception raised while deciding or appending a batch falls in one of three classes:

- ``BAD_INPUT``: caused by the data of an intent: a value PostgreSQL refuses (SQLSTATE class 22
  data exception, 23 integrity constraint, 54 program limit such as an index row too large), a
  value that cannot be encoded (``ValueError``, ``OverflowError``, ``RecursionError``,
  ``msgspec.EncodeError``). The batch is split until the intent is isolated, and that intent
  alone gets an ``IntentRejected``. (An exception inside ``decide`` is attributed to its intent
  directly, whatever its type: see ``batch.IntentFailed``.)
- ``TRANSIENT``: the outside world (PostgreSQL or NATS down, a connection reset, a timeout, a
  lock or statement timeout, a serialization failure). Retried in order, nothing skipped.
- ``FATAL``: the deployment or the code is wrong (schema missing, permission denied,
  authentication, a log row that does not decode, any exception not listed above). Retried with
  back-off as well, but nothing is rejected for it, since a systemic error would otherwise reject
  every intent in turn: the stuck alarm (``/readyz`` 503, ``gpuledger_stuck_seconds``) tells an
  operator.
"""

from __future__ import annotations

import asyncio
import enum

import asyncpg
import msgspec
from nats import errors as nats_errors

from services.allocator.ports import CorruptEventError


class Failure(enum.Enum):
    """What a failure says about the intent being decided (see the module docstring)."""

    BAD_INPUT = "bad_input"
    TRANSIENT = "transient"
    FATAL = "fatal"


_TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "55", "57", "58", "HV")
"""Connection exception, transaction rollback (serialization, deadlock), insufficient resources,
object not in prerequisite state (lock_timeout), operator intervention (statement timeout,
admin shutdown), system error."""
_BAD_INPUT_SQLSTATE_CLASSES = ("22", "23", "54")
"""Data exception (out of range, invalid text), integrity constraint violation, program limit
exceeded (index row size); every other class not listed as transient is fatal."""
_BAD_INPUT_TYPES: tuple[type[BaseException], ...] = (ValueError, OverflowError, RecursionError,
                                                     msgspec.EncodeError)

_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionError and socket errors
    TimeoutError,
    asyncio.TimeoutError,
    asyncpg.InterfaceError,  # connection closed / in a bad state
    asyncpg.exceptions.InternalClientError,
    nats_errors.Error,  # every nats-py error: no server, timeout, flush, connection closed
)


def classify(exc: BaseException) -> Failure:
    """The class of ``exc`` (see the module docstring); never raises."""
    if isinstance(exc, CorruptEventError):
        return Failure.FATAL
    if isinstance(exc, asyncpg.PostgresError):
        state = str(getattr(exc, "sqlstate", "") or "")
        if state[:2] in _TRANSIENT_SQLSTATE_CLASSES:
            return Failure.TRANSIENT
        return Failure.BAD_INPUT if state[:2] in _BAD_INPUT_SQLSTATE_CLASSES else Failure.FATAL
    if isinstance(exc, _TRANSIENT_TYPES):
        return Failure.TRANSIENT
    return Failure.BAD_INPUT if isinstance(exc, _BAD_INPUT_TYPES) else Failure.FATAL


def describe(exc: BaseException, *, limit: int = 512) -> str:
    """A one-line description of ``exc`` for an ``IntentRejected.reason``, at most ``limit``
    characters (for PostgreSQL errors asyncpg's text carries the message and its DETAIL)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
