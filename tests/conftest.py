"""Shared fixtures. Async tests run on uvloop, as the server does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import uvloop


def pytest_asyncio_loop_factories(
        config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], object]]:
    return {"uvloop": uvloop.new_event_loop}
