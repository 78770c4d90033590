"""A real PgBouncer in transaction pooling mode, in front of the test PostgreSQL.

The store suite runs every Postgres test again through it (backend
``postgres-pgbouncer``), so that the savers are shown to work where production puts
them: behind a pooler that hands a server connection to a client for one transaction
only. Debian's ``pgbouncer`` package provides ``/usr/sbin/pgbouncer``; when it cannot
run the tests skip, unless ``HANDRAIL_REQUIRE_PGBOUNCER=1`` (CI), which makes them fail.

PgBouncer refuses to run as root, so as root it runs as the ``postgres`` user. It gets a
directory, a config file and a free port of its own; a system service the package may
have started is left alone.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

REQUIRE_PGBOUNCER_ENV = "HANDRAIL_REQUIRE_PGBOUNCER"
BINARY = "/usr/sbin/pgbouncer"
RUN_AS = "postgres"


class Unavailable(Exception):
    """PgBouncer cannot run here; the message says why."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(directory: Path, port: int, server_dsn: str) -> str:
    parts = urlsplit(server_dsn)
    database = parts.path.lstrip("/") or "postgres"
    user = parts.username or "postgres"
    target = f"host={parts.hostname or '127.0.0.1'} port={parts.port or 5432} dbname={database} user={user}"
    return "\n".join(
        [
            "[databases]",
            f"{database} = {target}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            f"unix_socket_dir = {directory}",
            "auth_type = any",
            "pool_mode = transaction",
            "max_client_conn = 500",
            # every saver pins one server connection for its liveness lock, and the
            # suite opens a few at a time; the test server allows 100 in all
            "default_pool_size = 30",
            "max_db_connections = 40",
            "server_reset_query =",
            "log_connections = 0",
            "log_disconnections = 0",
            "log_stats = 0",
            f"logfile = {directory / 'pgbouncer.log'}",
            f"pidfile = {directory / 'pgbouncer.pid'}",
            "",
        ]
    )


@contextmanager
def running_pgbouncer(server_dsn: str) -> Iterator[str]:
    """Start PgBouncer in front of ``server_dsn``; yield the DSN that goes through it."""
    import psycopg

    if not os.path.exists(BINARY):
        raise Unavailable(f"{BINARY} is missing (apt-get install -y pgbouncer)")
    prefix: list[str] = []
    directory = Path(tempfile.mkdtemp(prefix="handrail-pgbouncer-"))
    if os.geteuid() == 0:  # pgbouncer will not run as root
        try:
            account = pwd.getpwnam(RUN_AS)
        except KeyError:
            raise Unavailable(
                f"running as root and there is no {RUN_AS!r} user to run pgbouncer as"
            ) from None
        os.chown(directory, account.pw_uid, account.pw_gid)
        prefix = ["runuser", "-u", RUN_AS, "--"]
    process: subprocess.Popen[bytes] | None = None
    try:
        parts = urlsplit(server_dsn)
        database = parts.path.lstrip("/") or "postgres"
        user = parts.username or "postgres"
        for _ in range(5):  # the port may be taken between finding it and binding it
            port = _free_port()
            config = directory / "pgbouncer.ini"
            config.write_text(_config(directory, port, server_dsn))
            os.chmod(config, 0o644)
            # its output goes to its log file only: a pipe nobody reads would fill and stop it
            process = subprocess.Popen(
                [*prefix, BINARY, "-q", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            dsn = f"postgresql://{user}@127.0.0.1:{port}/{database}"
            deadline = time.monotonic() + 20  # a safety net, not a measurement
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    with psycopg.connect(
                        dsn, connect_timeout=2, autocommit=True, prepare_threshold=None
                    ) as conn:
                        conn.execute("SELECT 1")
                    break
                except psycopg.OperationalError:
                    time.sleep(0.05)
            else:
                log = directory / "pgbouncer.log"
                output = log.read_text(errors="replace") if log.exists() else ""
                if process.poll() is None:
                    process.terminate()
                    process.wait()
                if "Address already in use" in output:
                    continue
                raise Unavailable(f"pgbouncer did not start: {output.strip()[-800:]}")
            yield dsn
            return
        raise Unavailable("pgbouncer found no free port")
    finally:
        if process is not None and process.poll() is None:
            process.terminate()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)
