"""The allocator loop's failure rules without I/O: classification, bounded log keys, sanitised
rejections, the stuck watchdog."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest
from nats import errors as nats_errors
from prometheus_client import CollectorRegistry

from events import codec
from services.allocator import ports
from services.allocator.loop import batch
from services.allocator.loop.failures import Failure, classify, describe
from services.allocator.loop.watchdog import Watchdog
from services.allocator.ports import CorruptEventError

NOW = datetime(2026, 1, 1, tzinfo=UTC)
pg = asyncpg.exceptions


@pytest.mark.parametrize(("error", "expected"), [
    (pg.NumericValueOutOfRangeError("bigint out of range"), Failure.BAD_INPUT),
    (pg.ProgramLimitExceededError("index row size 3016 exceeds btree maximum 2704"), Failure.BAD_INPUT),
    (pg.CheckViolationError("violates check constraint"), Failure.BAD_INPUT),
    (pg.CharacterNotInRepertoireError("invalid byte sequence"), Failure.BAD_INPUT),
    (OverflowError("int too big to convert"), Failure.BAD_INPUT),
    (UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"), Failure.BAD_INPUT),
    (KeyError("a bug in the store: systemic, never blamed on an intent"), Failure.FATAL),
    (pg.ActiveSQLTransactionError("cannot run inside a transaction block"), Failure.FATAL),
    (RecursionError("maximum recursion depth exceeded"), Failure.BAD_INPUT),
    (pg.UndefinedTableError('relation "events" does not exist'), Failure.FATAL),
    (pg.InsufficientPrivilegeError("permission denied"), Failure.FATAL),
    (CorruptEventError("position 7"), Failure.FATAL),
    (pg.QueryCanceledError("canceling statement due to statement timeout"), Failure.TRANSIENT),
    (pg.LockNotAvailableError("canceling statement due to lock timeout"), Failure.TRANSIENT),
    (pg.SerializationError("could not serialize"), Failure.TRANSIENT),
    (pg.AdminShutdownError("terminating connection"), Failure.TRANSIENT),
    (pg.ConnectionDoesNotExistError("connection was closed"), Failure.TRANSIENT),
    (ConnectionRefusedError(111, "Connect call failed"), Failure.TRANSIENT),
    (TimeoutError(), Failure.TRANSIENT),
    (nats_errors.FlushTimeoutError(), Failure.TRANSIENT),
    (nats_errors.NoServersError(), Failure.TRANSIENT),
])
def test_each_failure_has_one_class(error: BaseException, expected: Failure) -> None:
    assert classify(error) is expected


def test_describe_is_one_bounded_line_with_the_detail() -> None:
    error = pg.CheckViolationError("new row violates check constraint\n  \"no_poison\"")
    error.detail = "Failing row contains " + "x" * 5000  # type: ignore[attr-defined]
    text = describe(error, limit=200)
    assert text.startswith("CheckViolationError: new row violates check constraint \"no_poison\" DETAIL: Failing")
    assert len(text) == 200 and "\n" not in text


def test_log_keys_are_the_id_when_storable_else_a_stable_digest() -> None:
    assert batch.log_key("req-a") == "req-a"
    long = batch.log_key("x" * 3000)
    assert long.startswith("sha256:") and len(long) == 71 and long == batch.log_key("x" * 3000)
    assert batch.log_key("a\x00b").startswith("sha256:")
    assert batch.log_key("\ud800").startswith("sha256:")
    assert batch.log_key("é" * 512) == "é" * 512  # 1,024 bytes: still itself
    assert batch.log_key("é" * 513).startswith("sha256:")


def test_a_rejection_is_bounded_and_storable_whatever_it_carries() -> None:
    delivery = ports.Delivery(stream_seq=9, subject="gpuledger.intent." + "s" * 5000,
                              data=b"\xff\x00" * 100_000, msg_id="m" * 5000)
    error = ValueError("bad \ud800 value " + "v" * 100_000)
    event = batch.rejected_event(delivery, reason=str(error) + "\x00", now=NOW, error=error)
    assert event.intent_id.startswith("sha256:")
    assert len(event.reason) <= batch.TEXT_LIMIT and len(event.subject) <= 256
    assert len(event.raw) <= batch.RAW_LIMIT and "\x00" not in event.raw + event.reason
    encoded = codec.encode(event)
    assert b"\\u0000" not in encoded and len(encoded) < 32_000
    encoded.decode("utf-8")  # no lone surrogate survived


def test_the_watchdog_raises_the_alarm_after_the_setting_and_resets_on_progress() -> None:
    now = [100.0]
    dog = Watchdog(CollectorRegistry(), stuck_after_s=30, relay_lag=lambda: 0, clock=lambda: now[0])
    dog.failed(5, OSError("down"))
    now[0] = 120.0
    dog.failed(5, OSError("still down"))
    assert dog.stuck_s == 20 and not dog.stuck
    now[0] = 130.0
    assert dog.stuck and dog.failing_seq == 5 and "still down" in dog.last_error
    dog.progressed()
    assert dog.stuck_s == 0 and not dog.stuck
