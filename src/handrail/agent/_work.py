"""How a method of the facade and its async twin share one implementation.

The runtime is written as generators that yield effects (``runtime/effects.py``), and
two drivers perform them: ``drive_sync`` with blocking calls, ``drive_async`` with
``await``. The facade does the same: a private method checks the arguments and returns a
:class:`Work`, the generator of what the call does and the ``Env`` to perform it in; the
public method only drives it, ``work.run()`` or ``await work.arun()``. Whatever a call
does after the runtime's part (shaping its result, trying a run again) is written once,
as more steps of that generator.

Example::

    def get_state(self, config):
        return self._snapshot(config).run()

    async def aget_state(self, config):
        return await self._snapshot(config).arun()
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Generic, TypeVar

from handrail.runtime.effects import Effect, Env, drive_async, drive_sync

__all__ = ["Pause", "Steps", "Within", "Work"]

T = TypeVar("T")
U = TypeVar("U")

Steps = Generator[Effect, Any, T]
"""A generator of effects that returns a ``T``."""


class Work(Generic[T]):
    """One call's steps and the ``Env`` they are performed in, ready to be driven either way."""

    __slots__ = ("env", "steps")

    def __init__(self, steps: Steps[T], env: Env) -> None:
        self.steps = steps
        self.env = env

    def run(self) -> T:
        """Perform the steps with blocking calls; their result."""
        result: T = drive_sync(self.steps, self.env)
        return result

    async def arun(self) -> T:
        """Perform the steps with ``await``; their result."""
        result: T = await drive_async(self.steps, self.env)
        return result

    def then(self, shape: Callable[[T], U]) -> Work[U]:
        """The same work, its result passed through ``shape``."""
        return Work(_then(self.steps, shape), self.env)


def _then(steps: Steps[T], shape: Callable[[T], U]) -> Steps[U]:
    return shape((yield from steps))


class Within(Effect):
    """Perform ``steps`` in an ``env`` of their own (another attempt's, a reader's), by the
    driver that performs this effect; their result."""

    __slots__ = ("env", "steps")

    def __init__(self, steps: Steps[Any], env: Env) -> None:
        self.steps = steps
        self.env = env

    def nested_sync(self, env: Env) -> tuple[Steps[Any], Env]:
        return self.steps, self.env

    def nested_async(self, env: Env) -> tuple[Steps[Any], Env]:
        return self.steps, self.env

    def run_sync(self, env: Env) -> Any:
        return drive_sync(self.steps, self.env)

    async def run_async(self, env: Env) -> Any:
        return await drive_async(self.steps, self.env)


class Pause(Effect):
    """Let other tasks go on (``asyncio.sleep(0)``); driven sync, nothing."""

    def run_sync(self, env: Env) -> None:
        return None

    async def run_async(self, env: Env) -> None:
        import asyncio

        await asyncio.sleep(0)
