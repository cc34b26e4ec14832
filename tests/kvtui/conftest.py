"""Shared fixtures for the UI tests: small deterministic synthetic traces (see tests/helpers/synthetic.py)."""

from __future__ import annotations

import pytest

from tests.helpers.synthetic import generate


@pytest.fixture(scope="session")
def small_trace():
    """About a thousand events: prefix hits, evictions, edits, forks and a window ring."""
    return generate(
        num_requests=20, seed=1, block_size=4, num_blocks=64, window=6, edit_rate=0.03, fork_rate=0.02
    )


@pytest.fixture(scope="session")
def medium_trace():
    return generate(
        num_requests=300, seed=7, block_size=4, num_blocks=96, window=8, edit_rate=0.02, fork_rate=0.02
    )


@pytest.fixture
def anyio_backend():
    """Async pilot tests run on asyncio through anyio's pytest plugin (no pytest-asyncio needed)."""
    return "asyncio"
