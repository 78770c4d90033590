"""A run, and when it is tried again: every run of the facade goes through :func:`attempts`.

Rules
-----
Rule 1 - A run that started from a cached reading no append confirmed (``env.optimistic``)
    and saved nothing runs again from a fresh reading, whether it failed or finished:
    it failed before saving anything, or its answer came from the cache alone. Nothing
    acts on the world before a run's first append (SPEC rule 7), so running it again
    repeats nothing.
Rule 2 - A run whose first append the store refused because another writer changed the
    thread first (another review's answer, say) runs again from a fresh reading when it
    did nothing before (no hook, wrapper, model or tool ran): running it again repeats
    nothing (issue 24). It is tried :data:`ATTEMPTS` times at most.
Rule 3 - A conflict that is not tried again is raised; one over an answer is named after
    the answer that won, read from the thread's audit trail
    (:class:`~handrail.errors.AlreadyAnsweredError`).
Rule 4 - After each attempt the agent's cache keeps the attempt's reading only when the
    store confirmed it (nothing failed, nothing left unsaved), and forgets the thread
    when nothing confirmed it.
Rule 5 - A claimed run (a worker's, ``run_claimed``) keeps its claim and its run id from
    one attempt to the next, and releases the claim when it ends for good.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from handrail.agent._work import Pause, Within
from handrail.decisions import name_first_answer
from handrail.errors import ConflictError
from handrail.runtime import loop, maintenance
from handrail.runtime.effects import Effect, Env, StoreCall
from handrail.types import AuditEntry

__all__ = ["ATTEMPTS", "attempts"]

ATTEMPTS = 8
"""How many times a run is tried when another writer changed the thread before its first append."""


def attempts(env: Env, request: loop.RunRequest) -> Generator[Effect, Any, loop.RunResult]:
    """Run ``request`` in ``env``, again from a fresh reading as the rules allow."""
    for attempt in range(1, ATTEMPTS + 1):
        again = False
        try:
            result: loop.RunResult = yield Within(loop.run(env, request), env)
            again = _stale(env)
            if not again:
                return result
        except ConflictError as exc:
            again = attempt < ATTEMPTS and _again(env)
            if not again:
                trail = (yield Within(*_trail(env))) if exc.interrupt_ids else []
                raise _named(exc, trail) from None
        except Exception:
            again = _stale(env)
            if not again:
                raise
        finally:
            _finish(env)
            if env.claimed and not again:
                yield Within(_release(env), env)
        env = _fresh(env)  # read again, and run again: nothing of the last attempt was saved or done
        yield Pause()  # let the writer that won go on
    raise AssertionError("unreachable")  # pragma: no cover


def _stale(env: Env) -> bool:
    """Whether a run started from a cached reading that no append confirmed (rule 1)."""
    return env.optimistic and env.appends == 0


def _again(env: Env) -> bool:
    """Whether a run refused by the store can run again from a fresh reading (rule 2)."""
    return env.conflicted and env.appends == 0 and not env.acted


def _trail(env: Env) -> tuple[Generator[Effect, Any, list[AuditEntry]], Env]:
    """The thread's audit trail, read afresh."""
    reader = Env(env.spec, env.store, env.thread_id)
    return maintenance.audit_trail(reader), reader


def _named(exc: ConflictError, trail: list[AuditEntry]) -> ConflictError:
    """A conflict over an answer, named after the answer that won when the log has it (rule 3)."""
    for interrupt_id in exc.interrupt_ids:
        named = name_first_answer(exc, interrupt_id, trail)
        if named is not exc:
            return named
    return exc


def _finish(env: Env) -> None:
    """Keep the attempt's reading in the cache, or forget the thread (rule 4)."""
    cache = env.spec.cache
    if env.optimistic and env.appends == 0:
        cache.drop(env.thread_id)  # never trust a reading nothing confirmed
    elif env.fold is not None and not env.broken and not env.buffer and env.spec.store is not None:
        cache.put(env.fold)  # only a reading that matches the store is worth keeping


def _release(env: Env) -> Generator[Effect, Any, None]:
    """End a claimed run's claim (rule 5)."""
    yield StoreCall("release_run", (env.thread_id, env.run_id))


def _fresh(env: Env) -> Env:
    """The next attempt's ``Env``: the same run, reading the thread from the store."""
    fresh = Env(
        env.spec,
        env.store,
        env.thread_id,
        run_id=env.run_id,
        emit=env.emit,
        modes=env.modes,
        trust_cache=False,
    )
    fresh.claimed = env.claimed  # a worker's claimed run keeps its claim and its run id
    return fresh
