"""Fixtures for the model adapter tests: a clean environment and a local provider server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from _llm_server import LLMServer


@pytest.fixture(autouse=True)
def clean_provider_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real keys, base URLs or credential profiles leak into a test."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.config/anthropic profile either


@pytest.fixture
def server() -> Iterator[LLMServer]:
    with LLMServer() as running:
        yield running
