"""The one place where the allocator loop decides what a failure means.

Every exception raised while deciding or appending a batch falls in one of three classes:

- ``BAD_INPUT``: caused by the data of an intent (a value PostgreSQL refuses: out of range,
  too long for an index row, invalid text; a bug the intent triggers in ``decide``). The batch is
  split until the intent is isolated, and that intent alone gets an ``IntentRejected``.
- ``TRANSIENT``: the outside world (PostgreSQL or NATS down, a connection reset, a timeout, a
  lock or statement timeout, a serialization failure). Retried in order, nothing skipped.
- ``FATAL``: the deployment is wrong (schema missing, permission denied, authentication, a log
  row that does not decode). Retried with back-off as well, but nothing is rejected for it: the
  stuck alarm (``/readyz`` 503, ``gpuledger_stuck_seconds``) tells an operator.

An exception not listed is treated as ``BAD_INPUT``: the bisection only blames an intent when the
intent fails *alone* and the intents around it succeed, so an unknown systemic error can never
reject more than the one intent it was first seen with before a later batch shows it systemic.
"""

from __future__ import annotations

import asyncio
import enum

import asyncpg
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
_FATAL_SQLSTATE_CLASSES = ("0A", "28", "2D", "3D", "3F", "42", "F0", "P0", "XX")
"""Feature not supported, authorization, invalid transaction termination, catalog/schema names,
syntax or access rule (undefined table, insufficient privilege), configuration, PL/pgSQL, internal."""

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
        if state[:2] in _FATAL_SQLSTATE_CLASSES:
            return Failure.FATAL
        return Failure.BAD_INPUT  # 22 data exception, 23 integrity, 54 program limit (index row size)
    if isinstance(exc, _TRANSIENT_TYPES):
        return Failure.TRANSIENT
    return Failure.BAD_INPUT


def describe(exc: BaseException, *, limit: int = 512) -> str:
    """A one-line description of ``exc`` for an ``IntentRejected.reason``, at most ``limit``
    characters (for PostgreSQL errors asyncpg's text carries the message and its DETAIL)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
