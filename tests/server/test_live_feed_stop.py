"""The live inbox's reader stops when the service does, whatever it was doing (issue 26's
helper found ``handrail serve`` could hang at shutdown on Python 3.11: a poke that lands
just before the stop made ``asyncio.wait_for`` drop the cancel, and the reader went on)."""

from __future__ import annotations

import asyncio

import served_agent

from handrail import InMemorySaver
from handrail.server._events import LiveFeed
from handrail.server.app import create_app
from handrail.server.db import ServerDB


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


async def test_the_deliverer_and_the_worker_stop_even_when_woken_just_before(tmp_path: object) -> None:
    """The same race in the deliverer's and the worker's loops (a hang of the notification
    tests' teardown, one run in four): woken just before the cancel, they went on waiting."""
    from handrail.notify.deliverer import Deliverer
    from handrail.notify.outbox import Outbox
    from handrail.worker import Worker

    db = ServerDB.open(db_path=tmp_path / "d.db")  # type: ignore[operator]
    outbox = Outbox(db)
    agent = served_agent.build(InMemorySaver())
    for _ in range(100):
        deliverer = Deliverer(outbox, None, public_url="http://h", channels={}, poll=30)
        running = asyncio.create_task(deliverer.run())
        for _ in range(3):
            await asyncio.sleep(0)  # it is waiting to be woken
        deliverer.wake()
        await asyncio.sleep(0)  # the wake ends its wait ...
        running.cancel()  # ... and the cancel lands at the same moment
        await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 5)
        worker = Worker({"sql": agent}, poll=30)
        working = asyncio.create_task(worker.run())
        for _ in range(3):
            await asyncio.sleep(0)
        worker.wake()
        await asyncio.sleep(0)
        working.cancel()
        await asyncio.wait_for(asyncio.gather(working, return_exceptions=True), 5)
