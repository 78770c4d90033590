"""A tool of plain scalar arguments needs no pydantic until an argument is not exactly
of its type (issue 16, the cold path): its JSON schema is written by handrail, and it is
exactly the one pydantic gives."""

from __future__ import annotations

import inspect
import json
import keyword
import subprocess
import sys
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from handrail import tool
from handrail.tools import Tool, ToolArgumentsError

# a parameter's name: no Python keyword (no function can have one), not self or cls
_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda n: n not in ("self", "cls") and not keyword.iskeyword(n)
)
_KINDS = st.sampled_from([str, int, float, bool])
_DEFAULTS = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5) | st.floats(-2, 2)


@st.composite
def _signatures(draw: st.DrawFn) -> list[tuple[str, type, Any, str | None]]:
    names = draw(st.lists(_NAMES, min_size=0, max_size=5, unique=True))
    fields: list[tuple[str, type, Any, str | None]] = []
    optional = False
    for name in names:
        kind = draw(_KINDS)
        optional = optional or draw(st.booleans())  # no required parameter after one with a default
        default = draw(_DEFAULTS) if optional else inspect.Parameter.empty
        fields.append((name, kind, default, draw(st.none() | st.text(max_size=8))))
    return fields


def _function(fields: list[tuple[str, type, Any, str | None]]) -> Any:
    def run(**kwargs: Any) -> str:
        return "done"

    run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=d, annotation=k)
            for n, k, d, _ in fields
        ]
    )
    run.__annotations__ = {n: k for n, k, _, _ in fields}
    docs = "".join(f"    {n}: {doc}\n" for n, _, _, doc in fields if doc)
    run.__doc__ = "Run it.\n\nArgs:\n" + docs if docs else "Run it."
    return run


@settings(max_examples=200, deadline=None)
@given(fields=_signatures())
def test_a_plain_signature_gets_exactly_the_schema_pydantic_gives(
    fields: list[tuple[str, type, Any, str | None]],
) -> None:
    made = Tool(_function(fields), name="run")
    assert made._args_schema is None  # no pydantic model was made for it
    expected = pydantic.create_model(
        "run_args",
        __config__=pydantic.ConfigDict(extra="forbid"),
        **{
            n: (
                k,
                pydantic.Field(
                    default=... if d is inspect.Parameter.empty else d, description=made._arg_docs.get(n)
                ),
            )
            for n, k, d, _ in fields
        },
    ).model_json_schema()
    expected.pop("title")
    assert json.dumps(made.json_schema) == json.dumps(expected)  # the same keys in the same order
    assert made.args_schema.model_json_schema()["properties"] == expected["properties"]


def test_a_plain_tool_checks_exact_arguments_and_coerces_or_refuses_the_rest_as_before() -> None:
    @tool
    def read_data(table: str, limit: int = 10) -> str:
        """Read rows from a table."""
        return f"{limit} rows from {table}"

    assert read_data._args_schema is None
    assert read_data.validate_args({"table": "t"}) == {"table": "t", "limit": 10}
    assert read_data._args_schema is None  # exact arguments: still no pydantic model
    assert read_data.validate_args({"table": "t", "limit": "5"}) == {"table": "t", "limit": 5}
    with pytest.raises(ToolArgumentsError, match="limit"):
        read_data.validate_args({"table": "t", "limit": "many"})
    with pytest.raises(ToolArgumentsError, match="colour: Extra inputs are not permitted"):
        read_data.validate_args({"table": "t", "colour": "red"})


def test_defining_and_describing_plain_tools_imports_no_pydantic() -> None:
    probe = (
        "import sys\n"
        "from handrail import tool\n"
        "@tool\n"
        "def execute_sql(query: str, dry_run: bool = False) -> str:\n"
        "    '''Run a SQL statement.'''\n"
        "    return 'ok'\n"
        "assert execute_sql.json_schema['required'] == ['query']\n"
        "assert execute_sql.validate_args({'query': 'SELECT 1'}) == {'query': 'SELECT 1', 'dry_run': False}\n"
        "print('pydantic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_tool_with_richer_arguments_still_gets_its_schema_from_pydantic() -> None:
    @tool
    def tag(names: list[str], note: str | None = None) -> str:
        """Tag things."""
        return ",".join(names)

    assert tag._plain is None and tag._args_schema is not None
    assert tag.json_schema["properties"]["names"] == {
        "items": {"type": "string"},
        "title": "Names",
        "type": "array",
    }


def test_names_pydantic_refuses_warns_about_or_reads_still_go_through_pydantic() -> None:
    """A tool whose argument is named ``_x``, ``model_config`` or ``json`` is judged by
    pydantic at definition, as before: refused, read as configuration, or warned about."""
    from handrail.tools import _MODEL_NAMES

    public = {n for n in dir(pydantic.BaseModel) if not n.startswith(("_", "model_"))}
    assert public <= _MODEL_NAMES
    with pytest.raises(pydantic.PydanticUserError, match="leading underscores"):
        Tool(_function([("_x", str, inspect.Parameter.empty, None)]), name="run")
    with pytest.warns(UserWarning, match="shadows an attribute"):
        shadowing = Tool(_function([("json", str, inspect.Parameter.empty, None)]), name="run")
    assert shadowing._plain is None
    configured = Tool(_function([("model_config", str, inspect.Parameter.empty, None)]), name="run")
    assert configured._plain is None and "model_config" not in configured.json_schema.get("properties", {})


def test_a_tool_name_with_a_trailing_newline_is_refused() -> None:
    """A defect: the name check matched up to a ``$``, which also matches before a final
    newline, so ``"evil\\n"`` was taken as a tool name."""
    from handrail import Tool

    def f() -> str:
        """Do it."""
        return "done"

    for bad in ("evil\n", "evil\r\n", "a b", "x" * 129):
        with pytest.raises(ValueError, match="is not valid"):
            Tool(f, name=bad)
    assert Tool(f, name="fine.name:1-2_x").name == "fine.name:1-2_x"
