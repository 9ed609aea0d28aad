"""Test-wide configuration: fixture plugins (real PostgreSQL, real nats-server, in-test Kubernetes API)."""

from __future__ import annotations

import os

import pytest

pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.nats",
    "tests.fixtures.kube_api",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``GPULEDGER_TEST_SKIP_INTEGRATION=1`` deselects tests marked ``integration`` (quick local runs)."""
    if os.environ.get("GPULEDGER_TEST_SKIP_INTEGRATION") != "1":
        return
    skip = pytest.mark.skip(reason="GPULEDGER_TEST_SKIP_INTEGRATION=1")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)
