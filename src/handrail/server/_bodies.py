"""The request bodies the service reads, as pydantic models: what the OpenAPI document shows.

Each model takes the LangGraph Platform API's fields that handrail serves; the values are
checked strictly (an integer is a JSON integer, a string a string), and a body that does
not fit is a 400 naming the field. A field of the LangGraph API that handrail does not
serve (``webhook``, ``ttl``, ``supersteps`` ...) is kept aside by the model
(``model_extra``) and refused by the route with a 422 that names it, as before; the
document lists only what is served (``additionalProperties: false``). The bounds they
apply are ``limits.py``'s: page sizes, ids, no NUL in metadata, JSON depth.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from handrail.server._limits import (
    MAX_ID,
    MAX_LIMIT,
    MAX_OFFSET,
    NEW_ID,
    NEW_ID_RULE,
    check_id,
    check_new_id,
    check_storable,
)
from handrail.server._problems import Problem

__all__ = [
    "AnswerBody",
    "AssistantSearch",
    "CheckpointPath",
    "Configurable",
    "HistoryBody",
    "InterruptPath",
    "Metadata",
    "RunBody",
    "RunCommand",
    "RunConfig",
    "RunPath",
    "ThreadCreate",
    "ThreadPath",
    "ThreadSearch",
]


def _metadata(value: dict[str, Any]) -> dict[str, Any]:
    return check_storable(value, "metadata")


Metadata = Annotated[
    dict[str, Any],
    AfterValidator(_metadata),
    Field(description="A JSON object; no key or string in it may hold a NUL character"),
]
"""Thread or run metadata, or a metadata filter: an object PostgreSQL's ``jsonb`` can hold."""

Id = Annotated[
    str,
    AfterValidator(check_id),
    Field(description=f"1 to {MAX_ID} characters, no control characters", max_length=MAX_ID),
]
"""An id a request names (a checkpoint's, say): short, no control characters."""

NewThreadId = Annotated[
    str,
    AfterValidator(check_new_id),
    Field(description=NEW_ID_RULE, json_schema_extra={"pattern": f"^{NEW_ID.pattern}$"}),
]
"""The id a client gives a new thread."""

_ID_PATH = f"1 to {MAX_ID} characters, no control characters"
ThreadPath = Annotated[str, Path(description=f"the thread's id: {_ID_PATH}"), AfterValidator(check_id)]
RunPath = Annotated[str, Path(description=f"the run's id: {_ID_PATH}"), AfterValidator(check_id)]
InterruptPath = Annotated[str, Path(description=f"the interrupt's id: {_ID_PATH}"), AfterValidator(check_id)]
CheckpointPath = Annotated[
    str, Path(description=f"the checkpoint's id: {_ID_PATH}"), AfterValidator(check_id)
]

Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"at most this many, 1 to {MAX_LIMIT}")]
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET, description="skip this many first")]


class _Body(BaseModel):
    """A JSON object body; the fields it does not name are kept in ``model_extra``."""

    model_config = ConfigDict(strict=True, extra="allow", json_schema_extra={"additionalProperties": False})

    def refuse_extra(self, what: str, status: int = 422, *, hint: str = "") -> None:
        """A ``status`` problem naming the fields handrail does not serve, if there are any."""
        unsupported = sorted(self.model_extra or {})
        if unsupported:
            raise Problem(status, f"{what} field(s) {unsupported} are not supported by handrail{hint}")

    def given(self) -> dict[str, Any]:
        """The fields the client sent (those handrail does not serve too), as plain JSON."""
        return self.model_dump(exclude_unset=True)


# Threads and assistants -------------------------------------------------------------------------
class ThreadCreate(_Body):
    """``POST /threads``."""

    thread_id: NewThreadId | None = None
    metadata: Metadata | None = Field(
        default=None, description="the thread's metadata; graph_id or assistant_id names its agent"
    )
    if_exists: str | None = Field(
        default=None,
        description="'raise' (a 409, the default) or 'do_nothing'",
        examples=["raise", "do_nothing"],
    )


class ThreadSearch(_Body):
    """``POST /threads/search``."""

    metadata: Metadata | None = Field(default=None, description="the threads whose metadata contains this")
    status: str | None = Field(
        default=None, description="'idle', 'busy' or 'interrupted'", examples=["idle", "busy", "interrupted"]
    )
    limit: Limit = 10
    offset: Offset = 0
    values: Any = Field(default=None, description="not supported by handrail (a 422 unless empty)")
    ids: Any = Field(default=None, description="not supported by handrail (a 422 unless empty)")
    sort_by: str | None = Field(default=None, description="'updated_at' only")
    sort_order: str | None = Field(default=None, description="'desc' only")


class CheckpointRef(_Body):
    """A checkpoint, by id."""

    checkpoint_id: Id


class HistoryBody(_Body):
    """``POST /threads/{thread_id}/history``."""

    limit: Limit = 10
    before: Id | CheckpointRef | None = Field(
        default=None, description="a checkpoint id, or {'checkpoint_id': ...}"
    )
    metadata: Any = Field(default=None, description="not supported by handrail (a 422 unless empty)")
    checkpoint: Any = Field(default=None, description="not supported by handrail (a 422 unless empty)")


class AssistantSearch(_Body):
    """``POST /assistants/search``."""

    graph_id: str | None = None
    name: str | None = None
    metadata: Metadata | None = None
    limit: Limit = 10
    offset: Offset = 0
    sort_by: str | None = None
    sort_order: str | None = None
    select: list[str] | None = None


# Runs --------------------------------------------------------------------------------------------
class RunCommand(_Body):
    """A run's ``command``: an answer to its pending reviews, or a state update (``admin``)."""

    resume: Any = Field(default=None, description="the answer, or {interrupt_id: answer}")
    update: Any = Field(default=None, description="a state update (admin scope)")


class Configurable(_Body):
    """A run's ``config.configurable``: the thread is the path's, the reviewer the credential's."""

    thread_id: Any = Field(default=None, description="ignored: the path names the thread")
    checkpoint_id: Id | None = Field(default=None, description="run from this checkpoint (admin scope)")
    checkpoint_ns: Any = None
    reviewer: Any = Field(default=None, description="ignored: the credential says who answers")
    channel: Any = Field(default=None, description="ignored: the service's channel is 'http'")
    assistant_id: Any = Field(default=None, description="the thread's own agent, if given")
    graph_id: Any = Field(default=None, description="the thread's own agent, if given")


class RunConfig(_Body):
    """A run's ``config``."""

    configurable: Configurable | None = None
    tags: list[str] | None = None
    metadata: Metadata | None = None


class RunBody(_Body):
    """The body of ``runs.create``, ``runs.wait`` and ``runs.stream`` (on a thread, or stateless)."""

    assistant_id: str = Field(description="the served agent to run", max_length=256)
    input: Any = Field(default=None, description="the agent's input, e.g. {'messages': [...]}")
    command: RunCommand | None = None
    stream_mode: str | list[str] | None = Field(
        default=None, description="values, updates, messages, messages-tuple or custom (or a list of them)"
    )
    config: RunConfig | None = None
    metadata: Metadata | None = None
    context: Any = None
    checkpoint_id: Id | None = Field(default=None, description="run from this checkpoint (admin scope)")
    multitask_strategy: str | None = Field(default=None, description="'reject' only")
    if_not_exists: str | None = Field(default=None, description="'reject' (the default) or 'create'")
    stream_subgraphs: bool | None = Field(default=None, description="false only")
    stream_resumable: bool | None = Field(default=None, description="false only")
    on_disconnect: str | None = Field(default=None, description="'continue' only")


# handrail's own paths ----------------------------------------------------------------------------
class AnswerBody(_Body):
    """``POST /handrail/threads/{thread_id}/interrupts/{interrupt_id}/answer``."""

    answer: Any = Field(description='the answer, e.g. {"decisions": [{"type": "approve"}]}')
    reviewer: Any = Field(default=None, description="ignored: the credential says who answers")
