"""Streaming a run: drivers that hand out each chunk as the run emits it.

A stream is driven by :func:`stream_sync`, a generator run by the consumer's own
``for`` loop in the consumer's thread, or :func:`stream_async`, an async generator run
in the consumer's task. They perform effects as ``drive_sync`` and ``drive_async`` do
(``effects.py``) and yield ``(mode, chunk)`` pairs in between: no second thread, no
queue. Which chunk goes out when is decided here and by the effects, once; the two
drivers only perform.

Rules
-----
Rule 1 - The loop's own chunks ("values", "updates") are an effect it yields,
    :class:`Emit`, only for the modes the stream wants; the driver hands each out when
    the loop yields it, in the loop's order, with nothing kept back.
Rule 2 - The steps an effect stands for (a wrap chain with no middleware, the calls of
    a tools step run one after another, an attempt's run: ``Effect.nested_sync``) are
    run by the driver itself, frame on frame, so what they emit goes out at once too.
Rule 3 - A model call that streams is pulled by the driver token chunk by token chunk
    (``Effect.source_sync``): each goes out as soon as the model gives it.
Rule 4 - Code the driver cannot step through runs to its end before control comes back:
    a hook, a tool, a middleware's ``wrap_model_call``/``wrap_tool_call`` (with the model
    or tool inside it), the calls of an async tools step running concurrently. What it
    writes meanwhile (``get_stream_writer()``, and a model's tokens inside a wrapper) is
    kept in order and handed out as soon as it returns, before anything emitted after it.
Rule 5 - A consumer that stops reading (``break``, ``close()``, the stream garbage
    collected) stops the run there: :class:`StreamClosed` is thrown into the loop where
    it waits, as a failure it did not cause, and the driver performs what the loop does
    on its way out (save what the run did, end its claim) without handing out anything
    more; anything that emits meanwhile stops too. A stopped stream raises nothing.
Rule 6 - The run's error reaches the consumer after every chunk emitted before it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from typing import Any

from handrail.runtime.effects import Effect, Env, Gen

__all__ = ["Emit", "StreamClosed", "stream_async", "stream_sync"]

Chunks = Generator[tuple[str, Any], None, Any]


class StreamClosed(BaseException):
    """Thrown into a run whose consumer stopped reading its stream (rule 5).

    A ``BaseException``, so that a tool's ``except Exception`` does not swallow it.
    """


class Emit(Effect):
    """Hand ``chunk`` out in ``mode`` (rule 1). The loop yields it only for a mode the
    stream wants; a driver that is not a stream's hands it to ``env.emit``, if any."""

    __slots__ = ("chunk", "mode")

    def __init__(self, mode: str, chunk: Any) -> None:
        self.mode = mode
        self.chunk = chunk

    def run_sync(self, env: Env) -> None:
        env.send(self.mode, self.chunk)

    async def run_async(self, env: Env) -> None:
        env.send(self.mode, self.chunk)


class _Outbox:
    """What is emitted out of the driver's sight (rule 4), in order; once the stream has
    stopped, an emit stops the run (rule 5)."""

    __slots__ = ("chunks", "closed")

    def __init__(self) -> None:
        self.chunks: list[tuple[str, Any]] = []
        self.closed = False

    def __call__(self, mode: str, chunk: Any) -> None:
        if self.closed:
            raise StreamClosed()
        self.chunks.append((mode, chunk))

    def take(self) -> list[tuple[str, Any]]:
        chunks, self.chunks = self.chunks, []
        return chunks


class _Frames:
    """The generators a stream runs, outermost first, each with the ``Env`` its effects
    are performed in (rule 2); what both drivers share."""

    __slots__ = ("error", "outbox", "stack", "value")

    def __init__(self, gen: Gen, env: Env) -> None:
        self.stack: list[tuple[Gen, Env]] = [(gen, env)]
        self.outbox = _Outbox()
        env.emit = self.outbox  # another attempt's Env takes it over (agent/_retry.py)
        self.value: Any = None
        self.error: BaseException | None = None

    @property
    def env(self) -> Env:
        """The ``Env`` of the innermost frame."""
        return self.stack[-1][1]

    def advance(self, send: Any, error: BaseException | None) -> Effect | None:
        """Send a result (or throw an error) into the innermost frame; the next effect of
        the run, or None once the outermost frame ended (its value or error kept)."""
        while True:
            gen = self.stack[-1][0]
            try:
                return gen.throw(error) if error is not None else gen.send(send)
            except StopIteration as stop:
                send, error = stop.value, None
            except BaseException as exc:  # into the frame that runs this one
                send, error = None, exc
            self.stack.pop()
            if not self.stack:
                self.value, self.error = send, error
                return None

    def ended(self) -> Any:
        """The run's value, or its error raised (rule 6)."""
        if self.error is not None:
            raise self.error
        return self.value

    def stop(self) -> Effect | None:
        """The consumer stopped reading: throw :class:`StreamClosed` into the run (rule 5);
        its next effect on the way out, or None when it was over."""
        self.outbox.closed = True
        self.outbox.chunks.clear()
        if not self.stack:
            return None
        return self.advance(None, StreamClosed())

    def stopped(self) -> None:
        """After a stop: an error other than the stop itself and a failure the stop led to
        (a ``KeyboardInterrupt``, say) goes on to the consumer."""
        if self.error is not None and not isinstance(self.error, (StreamClosed, Exception)):
            raise self.error


def _result(effect: Effect) -> tuple[Any, BaseException | None]:
    """The result of an effect whose source is used up, or its error."""
    try:
        return effect.result(), None
    except BaseException as exc:
        return None, exc


def stream_sync(gen: Gen, env: Env) -> Chunks:
    """Run a loop generator with blocking calls in the caller's thread, yielding each
    ``(mode, chunk)`` as it is emitted; returns the run's value."""
    frames = _Frames(gen, env)
    source: Generator[Any, None, None] | None = None
    try:
        effect = frames.advance(None, None)
        while True:
            yield from frames.outbox.take()
            if effect is None:
                return frames.ended()
            send: Any = None
            error: BaseException | None = None
            if isinstance(effect, Emit):
                yield effect.mode, effect.chunk
            elif (nested := effect.nested_sync(frames.env)) is not None:
                frames.stack.append(nested)
            elif (source := effect.source_sync(frames.env)) is not None:
                while True:
                    try:
                        item = next(source)
                    except StopIteration:
                        send, error = _result(effect)
                        break
                    except BaseException as exc:
                        error = exc
                        break
                    yield effect.took(item)
                source = None
            else:
                try:
                    send = effect.run_sync(frames.env)
                except BaseException as exc:  # handed back to the generator, which may handle it
                    error = exc
            effect = frames.advance(send, error)
    except GeneratorExit:  # the consumer stopped reading: a generator may not yield now
        if source is not None:
            source.close()
        effect = frames.stop()
        while effect is not None:
            try:
                send, error = effect.run_sync(frames.env), None
            except BaseException as exc:
                send, error = None, exc
            effect = frames.advance(send, error)
        frames.stopped()


async def stream_async(gen: Gen, env: Env) -> AsyncGenerator[tuple[str, Any], None]:
    """Run a loop generator with ``await`` in the caller's task, yielding each
    ``(mode, chunk)`` as it is emitted; the run's error, if it fails, is raised."""
    frames = _Frames(gen, env)
    source: AsyncGenerator[Any, None] | None = None
    try:
        effect = frames.advance(None, None)
        while True:
            for chunk in frames.outbox.take():
                yield chunk
            if effect is None:
                frames.ended()
                return
            send: Any = None
            error: BaseException | None = None
            if isinstance(effect, Emit):
                yield effect.mode, effect.chunk
            elif (nested := effect.nested_async(frames.env)) is not None:
                frames.stack.append(nested)
            elif (source := effect.source_async(frames.env)) is not None:
                while True:
                    try:
                        item = await anext(source)
                    except StopAsyncIteration:
                        send, error = _result(effect)
                        break
                    except BaseException as exc:
                        error = exc
                        break
                    yield effect.took(item)
                source = None
            else:
                try:
                    send = await effect.run_async(frames.env)
                except BaseException as exc:
                    error = exc
            effect = frames.advance(send, error)
    except GeneratorExit:
        if source is not None:
            await source.aclose()
        effect = frames.stop()
        while effect is not None:
            try:
                send, error = await effect.run_async(frames.env), None
            except BaseException as exc:
                send, error = None, exc
            effect = frames.advance(send, error)
        frames.stopped()
