"""Structured output: ``create_agent(response_format=...)`` as in LangChain v1.

The agent's final answer is parsed into a schema and kept in
``state["structured_response"]``. Two strategies:

- :class:`ToolStrategy`: the schema is offered to the model as an extra tool; the model
  answers by calling it. The call is answered at once with a ``ToolMessage`` (it never
  reaches the tools step, so a review policy never gates it) and the run ends.
- :class:`ProviderStrategy`: the provider's own JSON mode (``response_format`` in the
  request, as OpenAI has it); the final message's text is parsed.

A bare schema picks :class:`ProviderStrategy` for OpenAI models and
:class:`ToolStrategy` for every other model.

Example::

    class Contact(BaseModel):
        name: str
        email: str

    agent = create_agent(model, tools=[], response_format=ToolStrategy(Contact))
    agent.invoke({"messages": ["Extract: John, john@example.com"]})["structured_response"]
    # Contact(name='John', email='john@example.com')

A schema is a pydantic model, a dataclass, a ``TypedDict`` or a JSON schema dict (parsed
into a dict); a ``ToolStrategy`` also takes a ``Union`` of them (one tool each).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple

from handrail.checkpoint import serde
from handrail.errors import ConfigurationError, HandrailError
from handrail.messages import AIMessage, BaseMessage, ToolMessage
from handrail.tools import Tool

__all__ = [
    "AutoStrategy",
    "MultipleStructuredOutputsError",
    "ProviderStrategy",
    "StructuredOutputError",
    "StructuredOutputValidationError",
    "ToolStrategy",
]

if TYPE_CHECKING:  # a type variable's default (PEP 696) is for type checkers
    from typing_extensions import TypeVar

    SchemaT = TypeVar("SchemaT", default=Any)
else:  # at run time a plain one serves (typing_extensions costs 3 ms to import)
    from typing import TypeVar

    SchemaT = TypeVar("SchemaT")

ERROR_TEMPLATE = "Error: {error}\n Please fix your mistakes."
"""The ToolMessage a failed structured answer gets when errors are handled (LangChain's layout)."""


class StructuredOutputError(HandrailError):
    """The model's structured answer could not be used."""

    def __init__(self, message: str, ai_message: AIMessage) -> None:
        super().__init__(message)
        self.ai_message = ai_message


class MultipleStructuredOutputsError(StructuredOutputError):
    """The model called more than one structured-output tool in one answer."""

    def __init__(self, tool_names: list[str], ai_message: AIMessage) -> None:
        self.tool_names = tool_names
        super().__init__(
            f"Model incorrectly returned multiple structured responses ({', '.join(tool_names)}) "
            "when only one is expected.",
            ai_message,
        )


class StructuredOutputValidationError(StructuredOutputError):
    """The model's structured answer does not match the schema."""

    def __init__(self, tool_name: str, source: Exception, ai_message: AIMessage) -> None:
        self.tool_name = tool_name
        self.source = source
        super().__init__(f"Failed to parse structured output for tool '{tool_name}': {source}.", ai_message)


class _Schema(NamedTuple):
    """One schema: its name, description, JSON schema and how to parse data into it."""

    schema: Any
    name: str
    description: str
    json_schema: dict[str, Any]

    @classmethod
    def of(cls, schema: Any, name: str | None = None, description: str | None = None) -> _Schema:
        if isinstance(schema, Mapping):
            json_schema = dict(schema)
            return cls(
                schema,
                name or str(json_schema.get("title") or "response_format"),
                description or str(json_schema.get("description") or ""),
                json_schema,
            )
        if not isinstance(schema, type):
            raise ConfigurationError(
                f"response_format schema must be a pydantic model, a dataclass, a TypedDict or a "
                f"JSON schema dict, got {schema!r}"
            )
        import pydantic  # loaded when a schema is first used, not on `import handrail`

        try:
            json_schema = pydantic.TypeAdapter(_validator_of(schema)).json_schema()
        except Exception as exc:
            raise ConfigurationError(f"cannot build a JSON schema for {schema.__name__}: {exc}") from None
        doc = schema.__doc__ or ""
        if dataclasses.is_dataclass(schema) and doc.startswith(f"{schema.__name__}("):
            doc = ""  # the signature dataclasses put in __doc__ is no description
        if issubclass(schema, pydantic.BaseModel) and doc == pydantic.BaseModel.__doc__:
            doc = ""
        return cls(schema, name or schema.__name__, description or doc.strip(), json_schema)

    def parse(self, data: Any) -> Any:
        if isinstance(self.schema, Mapping):
            if not isinstance(data, Mapping):
                raise ValueError(f"expected an object, got {type(data).__name__}")
            return dict(data)
        import pydantic

        validator = _validator_of(self.schema)
        parsed = pydantic.TypeAdapter(validator).validate_python(data)
        if validator is not self.schema:  # a TypedDict: a plain dict of the keys given
            return parsed.model_dump(exclude_unset=True)
        return parsed

    def tool(self) -> Tool:
        """The schema as a tool the model can call (never run: the loop answers it)."""
        stand_in = Tool(_never_run, name=self.name, description=self.description or f"Answer as {self.name}")
        parameters = {k: v for k, v in self.json_schema.items() if k not in ("title", "description")}
        stand_in._json_schema = parameters
        return stand_in


def _validator_of(schema: type) -> Any:
    """What pydantic validates ``schema`` with: itself, or for a ``TypedDict`` an equivalent model

    (pydantic refuses ``typing.TypedDict`` before Python 3.12)."""
    from typing_extensions import is_typeddict  # (it knows typing_extensions' TypedDict too)

    if not is_typeddict(schema):
        return schema
    import pydantic

    hints = typing.get_type_hints(schema)
    required = getattr(schema, "__required_keys__", frozenset(hints))
    fields: dict[str, Any] = {key: (hint, ... if key in required else None) for key, hint in hints.items()}
    return pydantic.create_model(schema.__name__, __doc__=schema.__doc__, **fields)


def _never_run() -> Any:
    raise RuntimeError("a structured-output tool is answered by the agent loop, never run")


def _members(schema: Any) -> list[Any]:
    origin = typing.get_origin(schema)
    if origin is typing.Union or isinstance(schema, types.UnionType):
        return list(typing.get_args(schema))
    return [schema]


HandleErrors = bool | str | type[Exception] | tuple[type[Exception], ...] | Callable[[Exception], str]


@dataclass(init=False)
class ToolStrategy(Generic[SchemaT]):
    """Structured output through a tool call the model makes.

    ``tool_message_content`` is the content of the ``ToolMessage`` that answers the call
    (default: ``"Returning structured response: <the response>"``). ``handle_errors``
    (default True) sends a malformed answer back to the model as an error for it to fix:
    True for every error, a string for a fixed message, an exception type or tuple of
    them for those only, or a callable ``(exception) -> message``; False raises
    :class:`StructuredOutputError` instead.
    """

    schema: Any
    tool_message_content: str | None
    handle_errors: HandleErrors
    schema_specs: list[_Schema] = field(default_factory=list)

    def __init__(
        self,
        schema: Any,
        *,
        tool_message_content: str | None = None,
        handle_errors: HandleErrors = True,
    ) -> None:
        self.schema = schema
        self.tool_message_content = tool_message_content
        self.handle_errors = handle_errors
        self.schema_specs = [_Schema.of(member) for member in _members(schema)]

    def error_message(self, exc: Exception) -> str | None:
        """The message that sends ``exc`` back to the model, or None to raise it."""
        handle = self.handle_errors
        if handle is False:
            return None
        if handle is True:
            return ERROR_TEMPLATE.format(error=exc)
        if isinstance(handle, str):
            return handle
        if isinstance(handle, type) and issubclass(handle, Exception):
            return ERROR_TEMPLATE.format(error=exc) if isinstance(exc, handle) else None
        if isinstance(handle, tuple):
            return ERROR_TEMPLATE.format(error=exc) if isinstance(exc, handle) else None
        make_message: Callable[[Exception], Any] = handle
        return str(make_message(exc))


@dataclass(init=False)
class ProviderStrategy(Generic[SchemaT]):
    """Structured output through the provider's own JSON mode.

    The request carries ``response_format={"type": "json_schema", ...}`` (the OpenAI
    form) and the final answer's text is parsed into the schema.
    """

    schema: Any
    strict: bool | None
    schema_spec: _Schema

    def __init__(self, schema: Any, *, strict: bool | None = None) -> None:
        self.schema = schema
        self.strict = strict
        self.schema_spec = _Schema.of(schema)

    def to_model_kwargs(self) -> dict[str, Any]:
        """The request settings that ask the provider for this schema."""
        json_schema: dict[str, Any] = {"name": self.schema_spec.name, "schema": self.schema_spec.json_schema}
        if self.strict is not None:
            json_schema["strict"] = self.strict
        return {"response_format": {"type": "json_schema", "json_schema": json_schema}}


@dataclass
class AutoStrategy(Generic[SchemaT]):
    """A bare schema: :class:`ProviderStrategy` for OpenAI models, :class:`ToolStrategy` otherwise."""

    schema: Any


def resolve(response_format: Any, provider: str) -> ToolStrategy[Any] | ProviderStrategy[Any] | None:
    """The strategy ``create_agent(response_format=...)`` runs with; its schemas become storable."""
    if response_format is None:
        return None
    if isinstance(response_format, (ToolStrategy, ProviderStrategy)):
        strategy = response_format
    else:
        schema = response_format.schema if isinstance(response_format, AutoStrategy) else response_format
        if provider == "openai" and len(_members(schema)) == 1:
            strategy = ProviderStrategy(schema)
        else:
            strategy = ToolStrategy(schema)
    specs = strategy.schema_specs if isinstance(strategy, ToolStrategy) else [strategy.schema_spec]
    for spec in specs:
        _make_storable(spec.schema)
    return strategy


_STORED: dict[type, str] = {}


def _make_storable(schema: Any) -> None:
    """Register a pydantic model or dataclass schema with the store's serialiser (SPEC rule 10).

    A structured response is saved as its JSON form under the schema's qualified name and
    rebuilt with the same schema when the thread is read; a record naming a schema this
    process does not know fails loudly.
    """
    if not isinstance(schema, type) or schema in _STORED:
        return
    import pydantic

    if not (issubclass(schema, pydantic.BaseModel) or dataclasses.is_dataclass(schema)):
        return  # TypedDicts and JSON schemas parse into plain dicts
    adapter = pydantic.TypeAdapter(schema)
    base = f"response_format:{schema.__module__}.{schema.__qualname__}"
    name, n = base, 1
    while name in _STORED.values():  # another class of the same name (a class made in a function)
        n += 1
        name = f"{base}#{n}"
    serde.register_type(
        name,
        schema,
        lambda value: {"data": adapter.dump_python(value, mode="json")},
        lambda fields: adapter.validate_python(fields["data"]),
    )
    _STORED[schema] = name


class Outcome(NamedTuple):
    """What the model step keeps of an answer: its messages, the response, a retry."""

    messages: list[BaseMessage]
    structured_response: Any = None
    retry: bool = False


def model_kwargs(
    response_format: Any, tools: list[Tool], tool_choice: Any
) -> tuple[list[Tool], Any, dict[str, Any]]:
    """The tools, tool choice and settings to call the model with under ``response_format``."""
    if isinstance(response_format, ToolStrategy):
        return [*tools, *(spec.tool() for spec in response_format.schema_specs)], "any", {}
    if isinstance(response_format, ProviderStrategy):
        return tools, tool_choice, response_format.to_model_kwargs()
    return tools, tool_choice, {}


def handle(response_format: Any, message: AIMessage) -> Outcome:
    """Read the model's answer under ``response_format``."""
    if isinstance(response_format, ProviderStrategy):
        if message.tool_calls:
            return Outcome([message])
        try:
            data = json.loads(message.text)
            parsed = response_format.schema_spec.parse(data)
        except Exception as exc:
            raise StructuredOutputValidationError(response_format.schema_spec.name, exc, message) from exc
        return Outcome([message], parsed)
    if not isinstance(response_format, ToolStrategy):
        return Outcome([message])
    specs = {spec.name: spec for spec in response_format.schema_specs}
    calls = [call for call in message.tool_calls if call["name"] in specs]
    if not calls:
        return Outcome([message])
    if len(calls) > 1:
        error: StructuredOutputError = MultipleStructuredOutputsError([c["name"] for c in calls], message)
        text = response_format.error_message(error)
        if text is None:
            raise error
        answers = [ToolMessage(text, tool_call_id=str(c["id"]), name=c["name"]) for c in calls]
        return Outcome([message, *answers], retry=True)
    call = calls[0]
    try:
        parsed = specs[call["name"]].parse(call["args"])
    except Exception as exc:
        error = StructuredOutputValidationError(call["name"], exc, message)
        text = response_format.error_message(error)
        if text is None:
            raise error from exc
        return Outcome(
            [message, ToolMessage(text, tool_call_id=str(call["id"]), name=call["name"])], retry=True
        )
    content = response_format.tool_message_content or f"Returning structured response: {parsed}"
    return Outcome([message, ToolMessage(content, tool_call_id=str(call["id"]), name=call["name"])], parsed)


def bind(request: Any) -> Any:
    """``request`` (a ModelRequest) as the model is called under its ``response_format``."""
    tools, tool_choice, settings = model_kwargs(request.response_format, request.tools, request.tool_choice)
    return request.override(
        tools=tools, tool_choice=tool_choice, model_settings={**settings, **request.model_settings}
    )
