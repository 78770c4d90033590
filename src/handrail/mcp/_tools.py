"""An MCP server's tool as a handrail :class:`~handrail.tools.Tool`.

The rules:

- The tool's **argument schema** is the server's ``inputSchema``, as given (its top-level
  ``title`` left out, as handrail's own schemas): models get it in the tool spec, the web
  inbox's edit form reads it from ``tool.json_schema``, and arguments (the model's and a
  reviewer's edit) are checked against it here with ``jsonschema`` before the call is
  sent. A schema that is not an object schema, not valid JSON Schema, or larger than
  ``schema_limit`` bytes leaves its tool out (``McpTools.skipped`` says why).
- The **description** is the server's, cleaned and bounded (:mod:`handrail.mcp._text`).
- The server's **annotations** (``title``, ``readOnlyHint``, ``destructiveHint``,
  ``idempotentHint``, ``openWorldHint``) are kept, as the server sent them, in
  ``tool.metadata["mcp"]["annotations"]``. They are hints from a server handrail does not
  trust: none of them changes what handrail does. In particular ``idempotentHint`` never
  makes a tool idempotent for SPEC rule 9; only ``load_tools(idempotent=[...])`` does.
- A **call** goes to the server's ``tools/call`` over the session its ``McpTools`` holds
  open, sync or async; the result becomes the ``ToolMessage`` as
  :mod:`handrail.mcp._results` says. A call that gets no result raises
  :class:`~handrail.mcp.McpCallError` (the run turns it into an error ``ToolMessage``).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import mcp_types as types
import orjson
from pydantic import BaseModel, ConfigDict

from handrail.context import ToolRuntime
from handrail.mcp._results import result_message
from handrail.mcp._session import Background, Connection, McpCallError, McpError
from handrail.mcp._text import TOOL_NAME, clean_text, quoted
from handrail.messages import ToolMessage, new_id
from handrail.tools import Tool, ToolArgumentsError

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["McpTool", "SkippedTool", "build_tools"]

_TITLE_LIMIT = 200
_MAX_PROBLEMS = 10
_ANNOTATIONS = (
    ("title", "title"),
    ("readOnlyHint", "read_only_hint"),
    ("destructiveHint", "destructive_hint"),
    ("idempotentHint", "idempotent_hint"),
    ("openWorldHint", "open_world_hint"),
)


class SkippedTool(NamedTuple):
    """A tool a server listed that ``load_tools`` left out, and why."""

    server: str
    name: str  # as the server sent it, quoted safely
    reason: str


class _Arguments(BaseModel):
    """Stands for an MCP tool's arguments where a pydantic model is asked for; the JSON
    schema (``McpTool.json_schema``) is what describes and checks them."""

    model_config = ConfigDict(extra="allow")


class McpTool(Tool):
    """A tool of an MCP server. ``load_tools`` makes them; the agent uses them as any tool.

    ``server`` is the server's name in ``load_tools``, ``remote_name`` the tool's name on
    the server (``name`` may carry a prefix), ``metadata["mcp"]`` what the server said of
    it (``title``, ``annotations``). Calling it directly returns its ``ToolMessage``.

    Example::

        tools = await load_tools(command=["python", "notes_server.py"])
        delete = tools.by_name("delete_note")
        delete.metadata["mcp"]["annotations"]   # {'destructiveHint': True}
        message = await delete.ainvoke({"note_id": 3})
    """

    def __init__(
        self,
        *,
        name: str,
        remote_name: str,
        server: str,
        description: str,
        input_schema: dict[str, Any],
        validator: Any,
        metadata: dict[str, Any],
        idempotent: bool,
        connection: Connection,
        background: Background | None,
        owner: object,
    ) -> None:
        self.remote_name = remote_name
        self.server = server
        self.metadata = metadata
        self._shown_schema = {key: value for key, value in input_schema.items() if key != "title"}
        self._validator = validator
        self._connection = connection
        self._background = background
        self._owner = owner  # the sessions stay open while any of their tools is alive
        super().__init__(
            self._call_now, name=name, description=description, args_schema=_Arguments, idempotent=idempotent
        )

    def __repr__(self) -> str:
        return f"McpTool(name={self.name!r}, server={self.server!r})"

    @property
    def json_schema(self) -> dict[str, Any]:
        """The server's ``inputSchema`` (without its top-level ``title``)."""
        return self._shown_schema

    def validate_args(self, args: Any) -> dict[str, Any]:
        """Check ``args`` against the server's schema; return them as a plain dict."""
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(self.name, [f"arguments must be an object, got {type(args).__name__}"])
        values = dict(args)
        try:
            errors = sorted(
                self._validator.iter_errors(values), key=lambda e: [str(p) for p in e.absolute_path]
            )
        except Exception as exc:  # e.g. a $ref the schema cannot resolve
            raise ToolArgumentsError(
                self.name, [f"the tool's schema could not be applied: {clean_text(str(exc), 200)}"]
            ) from None
        if errors:
            problems = [
                f"{'.'.join(str(part)[:40] for part in error.absolute_path) or 'arguments'}: "
                f"{clean_text(error.message, 200)}"
                for error in errors[:_MAX_PROBLEMS]
            ]
            if len(errors) > _MAX_PROBLEMS:
                problems.append(f"and {len(errors) - _MAX_PROBLEMS} more")
            raise ToolArgumentsError(self.name, problems)
        return values

    def run(self, values: Mapping[str, Any], runtime: ToolRuntime | None = None) -> ToolMessage:
        """Call the tool on its server and wait (bounded by the ``timeout`` of ``load_tools``)."""
        return self._submit(values, runtime).result()

    async def arun(self, values: Mapping[str, Any], runtime: ToolRuntime | None = None) -> ToolMessage:
        """Call the tool on its server; cancelling the caller cancels the request."""
        return await asyncio.wrap_future(self._submit(values, runtime))

    def _submit(self, values: Mapping[str, Any], runtime: ToolRuntime | None) -> Future[ToolMessage]:
        if self._background is None:
            raise McpCallError(f"{self.name!r} runs on the event loop that holds its session only")
        try:
            return self._background.submit(self._send(values, runtime))
        except McpError:
            raise McpCallError(
                f"MCP server {self.server!r} is closed (its McpTools was closed): the call to "
                f"{self.name!r} was not sent"
            ) from None

    def _call_now(self, **arguments: Any) -> ToolMessage:
        return self.run(self.validate_args(arguments))

    async def _send(self, values: Mapping[str, Any], runtime: ToolRuntime | None) -> ToolMessage:
        call_id = runtime.tool_call_id if runtime is not None and runtime.tool_call_id else new_id("call_")
        result = await self._connection.call(self.remote_name, dict(values), shown=self.name)
        return result_message(result, call_id=call_id, name=self.name)


def build_tools(
    listed: list[types.Tool],
    *,
    server: str,
    prefix: str,
    connection: Connection,
    background: Background | None,
    owner: object,
    idempotent: frozenset[str],
    description_limit: int,
    schema_limit: int,
    kind: type[McpTool] | None = None,
) -> tuple[list[McpTool], list[SkippedTool]]:
    """The handrail tools for what one server listed, and those left out with the reason."""
    tools: list[McpTool] = []
    skipped: list[SkippedTool] = []
    seen: set[str] = set()
    for remote in listed:
        name = prefix + remote.name
        problem = _name_problem(remote.name, name, seen) or _schema_problem(remote.input_schema, schema_limit)
        validator = None
        if problem is None:
            validator, problem = _validator(remote.input_schema)
        if problem is not None:
            skipped.append(SkippedTool(server, quoted(remote.name), problem))
            continue
        seen.add(name)
        tools.append(
            (kind or McpTool)(
                name=name,
                remote_name=remote.name,
                server=server,
                description=_description(remote, description_limit),
                input_schema=remote.input_schema,
                validator=validator,
                metadata={"mcp": _metadata(remote, server)},
                idempotent=name in idempotent,
                connection=connection,
                background=background,
                owner=owner,
            )
        )
    return tools, skipped


def _name_problem(remote: str, name: str, seen: set[str]) -> str | None:
    if not TOOL_NAME.fullmatch(name):
        return (
            "its name is not a valid tool name (1 to 128 letters, digits, '_', '-', '.' or ':', "
            "prefix included)"
        )
    if name in seen:
        return "the server lists two tools of this name"
    return None


def _schema_problem(schema: Any, limit: int) -> str | None:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return "its inputSchema is not a JSON schema of type 'object'"
    try:
        size = len(orjson.dumps(schema))
    except TypeError:  # pragma: no cover - the schema arrives as parsed JSON
        return "its inputSchema is not JSON"
    if size > limit:
        return f"its inputSchema is {size} bytes, over the limit of {limit} (schema_limit)"
    return None


def _validator(schema: dict[str, Any]) -> tuple[Any, str | None]:
    """A ``jsonschema`` validator for ``schema``, or why there is none."""
    jsonschema = importlib.import_module("jsonschema")  # (untyped: loaded as a module value)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return None, f"its inputSchema is not a valid JSON schema: {clean_text(exc.message, 200)}"
    return cls(schema), None


def _description(remote: types.Tool, limit: int) -> str:
    text = (remote.description or remote.title or "").strip()
    return clean_text(text, limit)


def _metadata(remote: types.Tool, server: str) -> dict[str, Any]:
    annotations: dict[str, Any] = {}
    if remote.annotations is not None:
        for wire, attribute in _ANNOTATIONS:
            value = getattr(remote.annotations, attribute)
            if isinstance(value, str):
                annotations[wire] = clean_text(value, _TITLE_LIMIT)
            elif isinstance(value, bool):
                annotations[wire] = value
    title = clean_text(remote.title, _TITLE_LIMIT) if remote.title else None
    return {"server": server, "name": remote.name, "title": title, "annotations": annotations}
