"""An unreachable PostgreSQL fails fast and says where and why (issue 13, item 11).

``from_conn_string(dsn).setup()`` against a port nobody listens on raises
:class:`~handrail.errors.StoreUnavailableError` naming the host, the port and the reason
the network gave, at the first attempt: the pool does not retry for its 30 s timeout,
printing its errors, and end in a ``PoolTimeout`` that names nothing.
"""

from __future__ import annotations

import logging
import socket

import pytest

from handrail.errors import ConfigurationError, HandrailError, StoreUnavailableError

pytest.importorskip("psycopg")
from handrail.checkpoint.postgres import AsyncPostgresSaver, PostgresSaver


def _closed_port() -> int:
    """A local port nobody listens on (it was free a moment ago, and nothing here takes it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _check(error: StoreUnavailableError, port: int) -> None:
    message = str(error)
    assert message.startswith(f"cannot connect to PostgreSQL at 127.0.0.1:{port}: "), message
    assert "refused" in message.lower(), message  # the reason, as the network gave it
    assert (error.host, error.port) == ("127.0.0.1", str(port))
    assert isinstance(error, HandrailError) and isinstance(error, ConnectionError)
    assert "\n" not in message


def test_setup_on_a_closed_port_fails_at_once_naming_host_port_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = _closed_port()
    saver = PostgresSaver.from_conn_string(f"postgresql://postgres@127.0.0.1:{port}/test")
    with caplog.at_level(logging.INFO), pytest.raises(StoreUnavailableError) as raised:
        saver.setup()
    _check(raised.value, port)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]  # the pool never tried
    with pytest.raises(StoreUnavailableError):  # and any later call says the same
        saver.get_thread("t")
    saver.close()


async def test_async_setup_on_a_closed_port_fails_at_once_naming_host_port_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = _closed_port()
    saver = AsyncPostgresSaver.from_conn_string(
        f"postgresql://postgres@127.0.0.1:{port}/test", connect_timeout=3
    )
    with caplog.at_level(logging.INFO), pytest.raises(StoreUnavailableError) as raised:
        await saver.setup()
    _check(raised.value, port)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]
    with pytest.raises(StoreUnavailableError):
        await saver.aget_thread("t")
    await saver.aclose()


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan")])
def test_a_connect_timeout_that_is_not_a_positive_number_is_refused(timeout: float) -> None:
    with pytest.raises(ConfigurationError, match="connect_timeout must be a number of seconds above 0"):
        PostgresSaver.from_conn_string("postgresql://localhost/x", connect_timeout=timeout)
    with pytest.raises(ConfigurationError, match="connect_timeout"):
        AsyncPostgresSaver.from_conn_string("postgresql://localhost/x", connect_timeout=timeout)
