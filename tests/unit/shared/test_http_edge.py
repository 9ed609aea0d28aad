"""The pure parts of the HTTP edge (services/shared/http_edge.py): which Host names are served,
the settings' bounds and the derived connection cap, and the rate-limited log."""

from __future__ import annotations

import resource

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.shared import http_edge
from services.shared.settings import SettingsError

ALLOWED = ("gpuledger-allocator", ".svc.cluster.local")


@pytest.mark.parametrize("host", [None, "127.0.0.1", "127.0.0.1:8480", "[::1]:8480", "::1", "10.0.0.7:80",
                                  "localhost", "LOCALHOST:1", "gpuledger-allocator:8480",
                                  "gpuledger-allocator.gpuledger-system.svc.cluster.local", "api.internal:9"])
def test_served_hosts(host: str | None) -> None:
    assert http_edge.host_served(host, bind_host="api.internal", allowed=ALLOWED)


@pytest.mark.parametrize("host", ["attacker.example", "attacker.example:8480", "localhost.attacker.example",
                                  "127.0.0.1.nip.io", "svc.cluster.local", "gpuledger-allocator.evil", "", ":80",
                                  "2130706433"])
def test_foreign_hosts(host: str) -> None:
    assert not http_edge.host_served(host, bind_host="127.0.0.1", allowed=ALLOWED)


@given(label=st.from_regex(r"[a-z][a-z0-9-]{0,20}\.[a-z]{2,6}", fullmatch=True))
def test_no_name_outside_the_allow_list_is_served(label: str) -> None:
    assert not http_edge.host_served(label, bind_host="0.0.0.0", allowed=ALLOWED)
    assert http_edge.host_served(label, bind_host="0.0.0.0", allowed=(label,))


def test_settings_are_read_and_bounded() -> None:
    edge = http_edge.load({"GPULEDGER_HTTP_HEADER_TIMEOUT_S": "2.5", "GPULEDGER_HTTP_MAX_CONNECTIONS": "40",
                           "GPULEDGER_HTTP_ALLOWED_HOSTS": " A.example:80, .svc ,"})
    assert (edge.header_timeout_s, edge.connection_cap, edge.host_names) == (2.5, 40, ("a.example", ".svc"))
    for bad in ({"GPULEDGER_HTTP_BODY_TIMEOUT_S": "0"}, {"GPULEDGER_HTTP_MAX_CONNECTIONS": "-1"},
                {"GPULEDGER_HTTP_IDLE_TIMEOUT_S": "soon"}):
        with pytest.raises(SettingsError):
            http_edge.load(bad)


def test_the_default_cap_is_a_quarter_of_the_descriptor_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    expected = 1024 if soft == resource.RLIM_INFINITY else max(16, min(1024, soft // 4))
    assert http_edge.EdgeSettings().connection_cap == expected
    with pytest.raises(msgspec.ValidationError):
        http_edge.EdgeSettings(header_timeout_s=-1)


def test_the_log_allows_a_burst_then_counts_what_it_left_out() -> None:
    lines = http_edge.RateLimitedLog("test", burst=3, window_s=3600)
    assert [lines.allow() for _ in range(5)] == [True, True, True, False, False]
    assert lines.suppressed == 2
