"""Tools: ``@tool``, the :class:`Tool` type, argument schemas and validation.

A tool is a function the model may call. Its name comes from the function, its
description from the docstring, its argument schema from the type hints (with the
``Args:`` section of the docstring describing each argument)::

    @tool
    def write_file(path: str, content: str) -> str:
        \"\"\"Write text to a file.

        Args:
            path: Where to write.
            content: What to write.
        \"\"\"
        ...

A parameter annotated :class:`~handrail.ToolRuntime` is injected by the run and hidden
from the schema. Async functions work the same way.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from handrail._tool_text import describe_errors, read_docstring
from handrail.context import ToolRuntime

if TYPE_CHECKING:  # pydantic loads when a schema is first built, not on `import handrail`
    from pydantic import BaseModel

__all__ = ["Tool", "ToolArgumentsError", "coerce_tool", "tool"]

F = TypeVar("F", bound=Callable[..., Any])

_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class ToolArgumentsError(ValueError):
    """Arguments that do not match a tool's schema; the message lists each problem."""

    def __init__(self, tool_name: str, problems: list[str]) -> None:
        self.tool_name = tool_name
        self.problems = problems
        super().__init__(f"arguments for {tool_name!r} do not match its schema: " + "; ".join(problems))


class Tool:
    """A callable the model may use, with a name, a description and an argument schema.

    Build one with :func:`tool`, or directly::

        Tool(read_data, name="read_data", description="Read rows from a table.")

    ``idempotent=True`` marks a tool that may safely run again after a crash
    (SPEC rule 9): a call that began but whose end was never saved is re-run instead of
    being shown to a person as ``outcome_unknown``.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        args_schema: type[BaseModel] | None = None,
        idempotent: bool = False,
        return_direct: bool = False,
        response_format: Literal["content", "content_and_artifact"] = "content",
    ) -> None:
        if not callable(func):
            raise TypeError(f"a tool needs a callable, got {type(func).__name__}")
        self.func = func
        resolved = name or getattr(func, "__name__", "")
        if not isinstance(resolved, str) or not _NAME_RE.fullmatch(resolved):
            raise ValueError(
                f"tool name {resolved!r} is not valid: use 1-128 letters, digits, '_', '-', '.' or ':'"
            )
        self.name: str = resolved
        summary, arg_docs = read_docstring(inspect.getdoc(func) or "")
        self.description = description if description is not None else summary
        self.idempotent = bool(idempotent)
        self.return_direct = bool(return_direct)
        if response_format not in ("content", "content_and_artifact"):
            raise ValueError(
                f"tool {resolved!r}: response_format must be 'content' or 'content_and_artifact', "
                f"got {response_format!r}"
            )
        self.response_format = response_format
        self.is_async = inspect.iscoroutinefunction(func)
        self._runtime_params = _runtime_params(func)
        self._arg_docs = arg_docs
        self._args_schema = args_schema
        self._inferred = args_schema is None  # made from the signature: undeclared args are ours to read
        # A signature of plain scalars (str, int, float, bool) needs no pydantic until an
        # argument is not exactly of its type: its schema is written here, the same as
        # pydantic's, and exact arguments are checked without it (see _exact_values).
        self._plain = _plain_signature(func, self.name, self._runtime_params) if args_schema is None else None
        if self._plain is None and args_schema is None:
            self._args_schema = _schema_from_signature(func, self.name, arg_docs, self._runtime_params)
        self._json_schema: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"

    @property
    def args_schema(self) -> type[BaseModel]:
        """The pydantic model of the arguments (made on first use for a plain signature)."""
        if self._args_schema is None:
            self._args_schema = _schema_from_signature(
                self.func, self.name, self._arg_docs, self._runtime_params
            )
        return self._args_schema

    @args_schema.setter
    def args_schema(self, model: type[BaseModel]) -> None:
        self._args_schema, self._plain, self._json_schema, self._inferred = model, None, None, False

    @property
    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments (what models and reviewers see)."""
        if self._json_schema is None:
            if self._plain is not None:
                schema = _plain_json_schema(self._plain, self._arg_docs)
            else:
                schema = self.args_schema.model_json_schema()
                schema.pop("title", None)
            self._json_schema = schema
        return self._json_schema

    def spec(self) -> dict[str, Any]:
        """The tool as models see it: ``{"name", "description", "parameters"}``."""
        return {"name": self.name, "description": self.description, "parameters": self.json_schema}

    def validate_args(self, args: Any) -> dict[str, Any]:
        """Check ``args`` against the schema; return the values to call the function with.

        Raises :class:`ToolArgumentsError` listing every problem.
        """
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(self.name, [f"arguments must be an object, got {type(args).__name__}"])
        if self._plain is not None:
            exact = _exact_values(self._plain, args)
            if exact is not None:
                return exact
        import pydantic

        try:
            model = self.args_schema.model_validate(dict(args))
        except pydantic.ValidationError as exc:
            raise ToolArgumentsError(self.name, describe_errors(exc)) from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    def validate_call(self, args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Read a model's call: the values to call the function with, and the arguments as
        the schema read them (:meth:`args_as_read`: what the audit records as run).

        As LangChain reads a call, an argument that a schema made from the function's
        signature does not declare is dropped; a schema given as ``args_schema`` decides
        for itself (pydantic's default drops it, ``extra="forbid"`` refuses it). A
        reviewer's edit is read strictly (:meth:`validate_args`). Raises
        :class:`ToolArgumentsError`.
        """
        if self._inferred and isinstance(args, Mapping):
            declared = {field[0] for field in self._plain} if self._plain else self.args_schema.model_fields
            args = {key: value for key, value in args.items() if key in declared}
        values = self.validate_args(args)
        return values, self.args_as_read(args, values)

    def args_as_read(self, args: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` as :meth:`validate_args` read them into ``values``: each given argument
        as the tool gets it, after the schema's coercion, in JSON form (``"12"`` for a
        ``float`` is ``12.0``); arguments the schema ignored are left out, defaults not added.
        """
        read: dict[str, Any] = {}
        for key, given in args.items():
            if key not in values:
                continue
            value = values[key]
            if type(value) is type(given) and type(given) in _SCALARS and value == given:
                read[key] = given
                continue
            if value is None or type(value) in _SCALARS:  # its own JSON form: no pydantic to load
                read[key] = value
                continue
            from pydantic_core import to_jsonable_python

            try:
                read[key] = to_jsonable_python(value)
            except (TypeError, ValueError):  # a value JSON cannot hold: the argument as given
                read[key] = given
        return read

    def _with_runtime(self, values: Mapping[str, Any], runtime: ToolRuntime | None) -> dict[str, Any]:
        out = dict(values)
        for param in self._runtime_params:
            out[param] = runtime
        return out

    def invoke(self, args: Mapping[str, Any], runtime: ToolRuntime | None = None) -> Any:
        """Validate ``args`` and call the tool (an async tool runs to completion here)."""
        return self.run(self.validate_call(args)[0], runtime)

    async def ainvoke(self, args: Mapping[str, Any], runtime: ToolRuntime | None = None) -> Any:
        """Validate ``args`` and call the tool; a sync tool runs in a worker thread."""
        return await self.arun(self.validate_call(args)[0], runtime)

    def run(self, values: Mapping[str, Any], runtime: ToolRuntime | None = None) -> Any:
        """Call the tool with values :meth:`validate_args` returned."""
        kwargs = self._with_runtime(values, runtime)
        if self.is_async:
            return run_coroutine_sync(self.func(**kwargs))
        return self.func(**kwargs)

    async def arun(self, values: Mapping[str, Any], runtime: ToolRuntime | None = None) -> Any:
        """Async :meth:`run`; a sync tool runs in a worker thread."""
        import asyncio

        kwargs = self._with_runtime(values, runtime)
        if self.is_async:
            return await self.func(**kwargs)
        return await asyncio.to_thread(self.func, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


@overload
def tool(func: F, /) -> Tool: ...


@overload
def tool(
    name: str | None = None,
    /,
    *,
    description: str | None = None,
    args_schema: type[BaseModel] | None = None,
    idempotent: bool = False,
    return_direct: bool = False,
    response_format: Literal["content", "content_and_artifact"] = "content",
    parse_docstring: bool = False,
    infer_schema: bool = True,
    error_on_invalid_docstring: bool = True,
    extras: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    args_schema: type[BaseModel] | None = None,
    idempotent: bool = False,
    return_direct: bool = False,
    response_format: Literal["content", "content_and_artifact"] = "content",
    parse_docstring: bool = False,
    infer_schema: bool = True,
    error_on_invalid_docstring: bool = True,
    extras: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    func: Any = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    args_schema: type[BaseModel] | None = None,
    idempotent: bool = False,
    return_direct: bool = False,
    response_format: Literal["content", "content_and_artifact"] = "content",
    parse_docstring: bool = False,
    infer_schema: bool = True,
    error_on_invalid_docstring: bool = True,
    extras: dict[str, Any] | None = None,
) -> Any:
    """Make a :class:`Tool` from a function; use bare or with options.

    Example::

        @tool
        def read_data(table: str) -> str:
            \"\"\"Read rows from a table.\"\"\"

        @tool(name="sql", description="Run SQL.", idempotent=False)
        def execute_sql(query: str) -> str: ...

        @tool("search")
        def web_search(q: str) -> str: ...

    As in LangChain: ``return_direct=True`` ends the run with the tool's result when
    every call of the model's turn was to such a tool; ``response_format=
    "content_and_artifact"`` makes the function return ``(content, artifact)``: the
    model sees the content, the artifact is kept on the ``ToolMessage``;
    ``args_schema=Model`` describes the arguments with a pydantic model.
    ``parse_docstring``, ``infer_schema``, ``error_on_invalid_docstring`` and ``extras``
    are accepted for LangChain code and change nothing: the ``Args:`` section of a
    docstring always describes the arguments, and the schema always comes from the hints.
    """
    if isinstance(func, str):
        name, func = func, None
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "args_schema": args_schema,
        "idempotent": idempotent,
        "return_direct": return_direct,
        "response_format": response_format,
    }
    if func is not None:
        return Tool(func, **options)

    def decorate(f: Callable[..., Any]) -> Tool:
        return Tool(f, **options)

    return decorate


def coerce_tool(value: Any) -> Tool:
    """Accept a :class:`Tool`, a plain function, or a duck-typed tool object."""
    if isinstance(value, Tool):
        return value
    adapter = getattr(value, "__handrail_tool__", None)
    if callable(adapter):
        result = adapter()
        if isinstance(result, Tool):
            return result
    if inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        return Tool(value)
    if (
        isinstance(getattr(value, "name", None), str)
        and hasattr(value, "args_schema")
        and callable(getattr(value, "invoke", None))
    ):
        from handrail.models.langchain import from_langchain_tool  # a LangChain tool

        return from_langchain_tool(value)
    raise TypeError(f"cannot use {value!r} as a tool: pass a function, an @tool function or a handrail Tool")


def run_coroutine_sync(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even when a loop is running here."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures
    import contextvars

    ctx = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(ctx.run, asyncio.run, coro).result()


def _runtime_params(func: Callable[..., Any]) -> list[str]:
    """Parameters annotated ``ToolRuntime`` (or ``ToolRuntime | None``): injected, not shown."""
    import typing

    def is_runtime(hint: Any) -> bool:
        origin = typing.get_origin(hint)
        if isinstance(origin, type) and issubclass(origin, ToolRuntime):
            return True  # ToolRuntime[Ctx] or ToolRuntime[Ctx, State]
        if isinstance(hint, type):
            return issubclass(hint, ToolRuntime)
        return any(is_runtime(arg) for arg in typing.get_args(hint) if arg is not type(None))

    hints = _type_hints(func)
    return [name for name in inspect.signature(func).parameters if is_runtime(hints.get(name))]


def _type_hints(func: Callable[..., Any]) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(func, include_extras=True)
    except Exception:  # unresolved forward references: fall back to raw annotations
        return dict(getattr(func, "__annotations__", {}))


def _schema_from_signature(
    func: Callable[..., Any], name: str, arg_docs: dict[str, str], skip: list[str]
) -> type[BaseModel]:
    import pydantic

    hints = _type_hints(func)
    fields: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        if param.name in skip or param.name in ("self", "cls"):
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(f"tool {name!r}: *args and **kwargs cannot be described to a model")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            annotation,
            pydantic.Field(default=default, description=arg_docs.get(param.name)),
        )
    model: type[BaseModel] = pydantic.create_model(
        f"{name}_args", __config__=pydantic.ConfigDict(extra="forbid"), **fields
    )
    return model


_REQUIRED = object()
_SCALARS = (str, int, float, bool)
_PlainFields = tuple[tuple[str, type, Any], ...]


def _plain_signature(func: Callable[..., Any], name: str, skip: list[str]) -> _PlainFields | None:
    """``(name, type, default)`` of each parameter, if every one is a plain ``str``,
    ``int``, ``float`` or ``bool`` with a scalar or None default (or none); else None."""
    try:
        hints = _type_hints(func)
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError, NameError):
        return None  # pydantic's path says what is wrong
    fields: list[tuple[str, type, Any]] = []
    for param in parameters:
        if param.name in skip or param.name in ("self", "cls"):
            continue
        kind = hints.get(param.name, Any)
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or kind not in _SCALARS:
            return None
        if param.name.startswith(("_", "model_")) or param.name in _MODEL_NAMES:
            return None  # pydantic refuses, warns about or reads such a name: it decides
        default = _REQUIRED if param.default is inspect.Parameter.empty else param.default
        if default is not _REQUIRED and default is not None and type(default) not in _SCALARS:
            return None
        fields.append((param.name, kind, default))
    return tuple(fields)


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}
# The public names of pydantic's BaseModel (tests/test_tool_schema.py checks the list):
# a field of one of these names shadows it, and pydantic warns
_MODEL_NAMES = frozenset(
    {
        "construct",
        "copy",
        "dict",
        "from_orm",
        "json",
        "parse_file",
        "parse_obj",
        "parse_raw",
        "schema",
        "schema_json",
        "update_forward_refs",
        "validate",
    }
)


def _plain_json_schema(fields: _PlainFields, docs: Mapping[str, str]) -> dict[str, Any]:
    """The JSON schema pydantic gives a model of these fields (``extra="forbid"``, its
    title left out), written without it: the same keys, in the same order."""
    properties: dict[str, Any] = {}
    for name, kind, default in fields:
        prop: dict[str, Any] = {}
        if default is not _REQUIRED:
            prop["default"] = default
        if docs.get(name) is not None:
            prop["description"] = docs[name]
        prop["title"] = name.title().replace("_", " ").strip()
        prop["type"] = _JSON_TYPES[kind]
        properties[name] = prop
    schema: dict[str, Any] = {"additionalProperties": False, "properties": properties}
    required = [name for name, _, default in fields if default is _REQUIRED]
    if required:
        schema["required"] = required
    schema["type"] = "object"
    return schema


def _exact_values(fields: _PlainFields, args: Mapping[str, Any]) -> dict[str, Any] | None:
    """The values pydantic would return, when each argument is exactly of its field's type
    (no coercion to make, nothing missing, nothing extra); None: let pydantic decide."""
    values: dict[str, Any] = {}
    given = 0
    for name, kind, default in fields:
        if name in args:
            value = args[name]
            if type(value) is not kind:
                return None
            values[name] = value
            given += 1
        elif default is _REQUIRED:
            return None
        else:
            values[name] = default
    return values if given == len(args) else None
