"""The edit form of a call, built from its tool's JSON schema, and its values read back typed.

A field for each argument, by the schema's type: a string is a text box (a text area
when long or multi-line), a number or an integer a number box, a boolean a check box,
an enum a list of its values, an object a group of fields, an array of simple values a
list of boxes; anything else (``anyOf``, arrays of objects, free-form objects) is a
JSON text area. Optional arguments and ``null``-able ones get a choice of sending the
value, leaving it out or sending ``null``. A value too long for a page (over
``markup.FOLD_LIMIT`` characters) is not put in its box: the field offers to keep the
proposed value (the server takes it from the review, so nothing long is sent back) or
to replace it with what is typed.

Values come back as the schema's types, never as strings: a number field gives a
number (``5``, not ``"5"``), an enum option its own JSON value. What cannot be read
(``"abc"`` in a number field, broken JSON) is an error named by the field, and nothing
is sent; what can be read still goes through the library's own check (SPEC rule 5).

Form names: ``v:<call>:<path>`` holds a value, ``s:<call>:<path>`` its choice (``set``,
``omit``, ``null``, ``keep``), where ``<path>`` is the JSON array of keys and indexes from the
arguments to the field. The page's script reads them the same way.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from handrail.server.pages._markup import FOLD_LIMIT, HIDDEN, json_text

__all__ = ["FieldSpec", "Form", "FormError", "build_fields", "read_fields", "resolve"]

Path = tuple[str | int, ...]
Form = Mapping[str, Sequence[str]]
_SIMPLE = ("string", "text", "number", "integer", "boolean", "enum")
_KIND_LABELS = {
    "string": "text",
    "text": "text",
    "number": "number",
    "integer": "whole number",
    "boolean": "true or false",
    "enum": "one of a list",
    "object": "group",
    "array": "list",
    "json": "JSON",
}


class FormError(ValueError):
    """A field's value cannot be read as its type; ``path`` names the field."""

    def __init__(self, path: Path, label: str, message: str) -> None:
        super().__init__(f"{label}: {message}")
        self.path = path
        self.label = label


@dataclass
class FieldSpec:
    """One field of an edit form (its schema resolved) and what it shows."""

    call: int
    path: Path
    label: str
    kind: str
    required: bool
    nullable: bool
    description: str
    schema: Mapping[str, Any]
    options: list[Any] = field(default_factory=list)
    children: list[FieldSpec] = field(default_factory=list)
    item: FieldSpec | None = None
    state: str = "set"
    raw: str = ""
    checked: bool = False
    error: str | None = None
    kept: Any = None
    kept_size: int = 0

    @property
    def name(self) -> str:
        """The form name of the value."""
        return f"v:{self.call}:{json_text(list(self.path), indent=False)}"

    @property
    def state_name(self) -> str:
        """The form name of the choice: send it, leave it out, or send null."""
        return f"s:{self.call}:{json_text(list(self.path), indent=False)}"

    @property
    def choices(self) -> list[str]:
        """The choices this field offers besides sending a value (empty: none)."""
        out = ["keep"] if self.kept_size else []
        if not self.required:
            out.append("omit")
        if self.nullable:
            out.append("null")
        return out

    @property
    def id(self) -> str:
        """The HTML id of the field's control (unique within the page)."""
        digest = hashlib.sha256(self.path_json.encode()).hexdigest()[:12]
        return f"f{self.call}-{digest}"

    @property
    def hides_characters(self) -> bool:
        """Whether the value holds control or invisible characters (the page warns of them)."""
        return bool(HIDDEN.search(self.raw))

    @property
    def kind_label(self) -> str:
        """What the field takes, in words."""
        return _KIND_LABELS.get(self.kind, self.kind)

    @property
    def next_index(self) -> int:
        """For a list: the index a new item gets (after every index in use)."""
        used = [c.path[-1] for c in self.children if c.path and isinstance(c.path[-1], int)]
        return max(used, default=-1) + 1

    @property
    def path_json(self) -> str:
        """The path as JSON (what the page's script reads from ``data-path``)."""
        return json_text(list(self.path), indent=False)

    def option_value(self, option: Any) -> str:
        """An enum option as the form sends it (its JSON)."""
        return json_text(option, indent=False)

    @property
    def constraints(self) -> dict[str, Any]:
        """HTML attributes from the schema's limits (the browser's own checks)."""
        schema = self.schema
        out: dict[str, Any] = {}
        if self.kind in ("number", "integer"):
            for name in ("minimum", "maximum"):
                if isinstance(schema.get(name), (int, float)) and not isinstance(schema.get(name), bool):
                    out[name[:3]] = schema[name]
        if self.kind in ("string", "text"):
            for name, attr in (("minLength", "minlength"), ("maxLength", "maxlength")):
                if isinstance(schema.get(name), int):
                    out[attr] = schema[name]
        return out


def resolve(schema: Any, root: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool]:
    """A schema with ``$ref``, one-item ``allOf`` and ``X | None`` unwrapped; and whether null is allowed."""
    nullable = False
    for _ in range(32):  # refs that loop give up and edit as JSON
        if not isinstance(schema, Mapping):
            return {}, nullable
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target.get(part) if isinstance(target, Mapping) else None
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest} if isinstance(target, Mapping) else {}
            continue
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list):
                real = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null")]
                if len(real) == 1 and len(options) == 2:
                    nullable = True
                    rest = {k: v for k, v in schema.items() if k != key}
                    schema = {**rest, **real[0]} if isinstance(real[0], Mapping) else rest
                    break
        else:
            all_of = schema.get("allOf")
            if isinstance(all_of, list) and len(all_of) == 1:
                rest = {k: v for k, v in schema.items() if k != "allOf"}
                schema = {**rest, **all_of[0]} if isinstance(all_of[0], Mapping) else rest
                continue
            types = schema.get("type")
            if isinstance(types, list) and "null" in types and len(types) == 2:
                nullable = True
                schema = {**schema, "type": next(t for t in types if t != "null")}
            return schema, nullable or schema.get("type") == "null"
    return {}, nullable


def _kind(schema: Mapping[str, Any], value: Any, root: Mapping[str, Any]) -> str:
    if "enum" in schema or "const" in schema:
        return "enum"
    if any(k in schema for k in ("anyOf", "oneOf", "allOf")):
        return "json"
    kind = schema.get("type")
    if kind == "string":
        long = isinstance(value, str) and ("\n" in value or len(value) > 80)
        return "text" if long or (schema.get("maxLength") or 0) > 200 else "string"
    if kind in ("number", "integer", "boolean"):
        return str(kind)
    if kind == "object" and isinstance(schema.get("properties"), Mapping):
        extra = isinstance(value, Mapping) and any(k not in schema["properties"] for k in value)
        return "json" if extra else "object"
    if kind == "array":
        item, item_nullable = resolve(schema.get("items"), root)
        if not item_nullable and _kind(item, None, root) in _SIMPLE:
            return "array"
    return "json"


def _raw(kind: str, value: Any) -> tuple[str, bool]:
    if kind in ("string", "text"):
        return (value if isinstance(value, str) else ""), False
    if kind == "boolean":
        return "true", value is True
    if kind in ("number", "integer"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return (json_text(value, indent=False) if ok else ""), False
    if kind == "enum":
        return ("" if value is _ABSENT else json_text(value, indent=False)), False
    if kind == "json":
        return ("" if value is _ABSENT else json_text(value)), False
    return "", False


_ABSENT: Any = object()


def _field(
    call: int,
    path: Path,
    schema: Any,
    root: Mapping[str, Any],
    value: Any,
    *,
    required: bool,
    label: str,
) -> FieldSpec:
    resolved, nullable = resolve(schema, root)
    kind = _kind(resolved, None if value is _ABSENT else value, root)
    spec = FieldSpec(
        call=call,
        path=path,
        label=label,
        kind=kind,
        required=required,
        nullable=nullable,
        description=str(resolved.get("description") or ""),
        schema=resolved,
    )
    if value is _ABSENT:
        spec.state = "omit" if not required else "set"
        value = resolved.get("default", _ABSENT)
        if value is None and nullable and not required:
            value = _ABSENT
    elif value is None and nullable:
        spec.state = "null"
        value = _ABSENT
    if kind == "enum":
        spec.options = list(resolved["enum"]) if "enum" in resolved else [resolved["const"]]
    if kind == "object":
        needed = set(resolved.get("required") or ())
        current = value if isinstance(value, Mapping) else {}
        spec.children = [
            _field(
                call,
                (*path, key),
                sub,
                root,
                current.get(key, _ABSENT),
                required=key in needed,
                label=str(key),
            )
            for key, sub in resolved["properties"].items()
        ]
    elif kind == "array":
        items = value if isinstance(value, list) else []
        spec.children = [
            _field(
                call, (*path, i), resolved.get("items"), root, v, required=True, label=f"{label} item {i + 1}"
            )
            for i, v in enumerate(items)
        ]
        template = (*path, len(items))
        spec.item = _field(call, template, resolved.get("items"), root, _ABSENT, required=True, label=label)
    else:
        spec.raw, spec.checked = _raw(kind, value)
        _keep_if_long(spec, value)
    return spec


def _keep_if_long(spec: FieldSpec, value: Any) -> None:
    """A value too long for the page: kept as proposed unless the reviewer replaces it."""
    if spec.kind in ("string", "text", "json") and len(spec.raw) > FOLD_LIMIT:
        spec.kept, spec.kept_size, spec.raw, spec.state = value, len(spec.raw), "", "keep"


def build_fields(call: int, schema: Mapping[str, Any] | None, args: Any) -> FieldSpec:
    """The edit form of call number ``call``: a group of fields, filled with ``args``.

    Without a usable schema (or for arguments the schema cannot describe) the form is
    one JSON text area holding the arguments.
    """
    if isinstance(schema, Mapping) and (args is None or isinstance(args, Mapping)):
        resolved, _ = resolve(schema, schema)
        if _kind(resolved, args, schema) == "object":
            return _field(call, (), schema, schema, args or {}, required=True, label="arguments")
    whole = FieldSpec(call, (), "arguments", "json", True, False, "", {})
    whole.raw = json_text(args)
    _keep_if_long(whole, args)
    return whole


def _form_values(form: Form, call: int) -> tuple[dict[Path, str], dict[Path, str]]:
    values: dict[Path, str] = {}
    states: dict[Path, str] = {}
    for key, sent in form.items():
        prefix, _, rest = key.partition(":")
        if prefix not in ("v", "s"):
            continue
        number, _, path_text = rest.partition(":")
        if number != str(call):
            continue
        try:
            path = orjson.loads(path_text)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(path, list) or not all(_step(p) for p in path):
            continue
        (values if prefix == "v" else states)[tuple(path)] = sent[-1] if sent else ""
    return values, states


def _step(part: Any) -> bool:
    return isinstance(part, str) or (isinstance(part, int) and not isinstance(part, bool))


def read_fields(spec: FieldSpec, form: Form) -> tuple[Any, list[FormError]]:
    """The arguments the form holds for ``spec`` (built by :func:`build_fields`), and its errors.

    ``spec`` is filled in place with what was sent (so a page shown again keeps it) and
    each field's error.
    """
    values, states = _form_values(form, spec.call)
    errors: list[FormError] = []
    value = _read(spec, values, states, errors)
    return value, errors


def _read(spec: FieldSpec, values: dict[Path, str], states: dict[Path, str], errors: list[FormError]) -> Any:
    # a kept long value whose choice was not sent (its form was switched off) stays kept
    state = states.get(spec.path, "keep" if spec.kept_size else "set") if spec.choices else "set"
    if state not in ("set", *spec.choices):
        state = "set"
    spec.state = state
    raw = values.get(spec.path, "")
    inner = errors if state == "set" else []  # what a left-out group holds is not checked
    if spec.kind == "object":
        out: dict[str, Any] = {}
        for child in spec.children:
            got = _read(child, values, states, inner)
            if child.state == "omit":
                continue
            out[str(child.path[-1])] = got
        return _chosen(state, out)
    if spec.kind == "array":
        indexes = sorted(
            p[-1]
            for p in values
            if len(p) == len(spec.path) + 1 and p[:-1] == spec.path and isinstance(p[-1], int)
        )
        assert spec.item is not None
        spec.children = []
        items = []
        for number, index in enumerate(indexes):
            child = FieldSpec(
                call=spec.call,
                path=(*spec.path, index),
                label=f"{spec.label} item {number + 1}",
                kind=spec.item.kind,
                required=True,
                nullable=False,
                description=spec.item.description,
                schema=spec.item.schema,
                options=list(spec.item.options),
            )
            spec.children.append(child)
            items.append(_read(child, values, states, inner))
        return _chosen(state, items)
    spec.raw = raw
    spec.checked = spec.kind == "boolean" and raw == "true"
    if state == "keep":
        return spec.kept
    if state != "set":
        return None
    try:
        return _parse(spec, raw)
    except FormError as exc:
        spec.error = str(exc).split(": ", 1)[-1]
        errors.append(exc)
        return None


def _chosen(state: str, value: Any) -> Any:
    return None if state == "null" else value


def _parse(spec: FieldSpec, raw: str) -> Any:

    def fail(message: str) -> FormError:
        return FormError(spec.path, spec.label, message)

    if spec.kind == "string":
        return raw
    if spec.kind == "text":
        return raw.replace("\r\n", "\n")
    if spec.kind == "boolean":
        return raw == "true"
    if spec.kind in ("number", "integer"):
        text = raw.strip()
        if not text:
            raise fail("enter a number" if spec.kind == "number" else "enter a whole number")
        try:
            number = orjson.loads(text)
        except orjson.JSONDecodeError:
            number = None
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise fail(f"{raw!r} is not a number")
        if spec.kind == "integer":
            if isinstance(number, float) and not number.is_integer():
                raise fail(f"{raw!r} is not a whole number")
            return int(number)
        return number
    if spec.kind == "enum":
        try:
            chosen = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise fail("choose one of the listed values") from None
        for option in spec.options:
            if type(option) is type(chosen) and option == chosen:
                return option
        raise fail("choose one of the listed values")
    try:
        return orjson.loads(raw.strip() or "null")
    except orjson.JSONDecodeError as exc:
        raise fail(f"not JSON ({exc})") from None
