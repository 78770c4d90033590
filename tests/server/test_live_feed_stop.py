"""The live inbox's reader stops when the service does, whatever it was doing (issue 26's
helper found ``handrail serve`` could hang at shutdown on Python 3.11: a poke that lands
just before the stop made ``asyncio.wait_for`` drop the cancel, and the reader went on)."""

from __future__ import annotations

import asyncio

import served_agent

from handrail import InMemorySaver
from handrail.server.app import create_app
from handrail.server.db import ServerDB
from handrail.server.events import LiveFeed


async def test_the_reader_stops_even_when_poked_just_before(tmp_path: object) -> None:
    db = ServerDB.open(db_path=tmp_path / "s.db")  # type: ignore[operator]
    app = create_app({"sql": served_agent.build(InMemorySaver())}, db=db)
    service = app.state.service
    for _ in range(200):
        feed = LiveFeed(service)
        await feed.start()
        await asyncio.sleep(0)  # the reader is waiting for a poke
        feed.poke()
        await asyncio.sleep(0)  # the poke wakes its wait ...
        await asyncio.wait_for(feed.stop(), 5)  # ... and the stop lands at the same moment
        assert feed._reader is not None and feed._reader.done()
