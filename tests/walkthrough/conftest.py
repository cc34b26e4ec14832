"""The walkthrough's pilot tests run on asyncio, as the app does."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
