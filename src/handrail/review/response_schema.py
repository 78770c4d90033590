"""The ``response_schema`` of a per-call review: the JSON schema of the answers it takes.

LangGraph 1.2 lets ``interrupt()`` carry the schema of the value that resumes it, and
LangChain's per-call review fills it with the decisions the tool allows - an edit's
``name`` pinned to the tool and its ``args`` following the tool's own argument schema -
as a ``oneOf`` told apart by ``type``. handrail gives a per-call review's
:class:`~handrail.Interrupt` the same shape, made from the review's value (its
``allowed_decisions``) and the tool, so a client can build or check an answer from it.
The schema describes; rule 5 still decides (``_answers.py`` checks every answer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["response_schema"]

_STRING = {"type": "string"}


def _decision(kind: str, description: str, **fields: Any) -> dict[str, Any]:
    required = ["type", *(name for name in fields if name != "message" or kind == "respond")]
    properties = {"type": {"const": kind, "title": "Type", "type": "string"}}
    properties.update(fields)
    return {
        "description": description,
        "properties": properties,
        "required": required,
        "title": f"{kind.capitalize()}Decision",
        "type": "object",
    }


_FIXED = {
    "approve": _decision("approve", "Run the call as the model proposed it."),
    "reject": _decision(
        "reject", "Do not run the call; the model is told why.", message={"title": "Message", **_STRING}
    ),
    "respond": _decision(
        "respond", "Do not run the call; the message is its result.", message={"title": "Message", **_STRING}
    ),
}


def response_schema(value: Any, tools: Mapping[str, Any]) -> dict[str, Any] | None:
    """The schema of the answers a per-call review (``{"type": "tool_approval", ...}``)
    takes, or None for any other interrupt (a batched review, ``outcome_unknown``, your own)."""
    if not isinstance(value, Mapping) or value.get("type") != "tool_approval":
        return None
    name, allowed = value.get("name"), value.get("allowed_decisions")
    if not isinstance(name, str) or not isinstance(allowed, list):
        return None
    defs: dict[str, Any] = {}
    refs: dict[str, str] = {}
    for kind in dict.fromkeys(allowed):
        if kind == "edit":
            args = _args_schema(name, tools.get(name), defs)
            defs["EditedAction"] = {
                "properties": {"name": {"const": name, "title": "Name", "type": "string"}, "args": args},
                "required": ["name", "args"],
                "title": "EditedAction",
                "type": "object",
            }
            defs["EditDecision"] = _decision(
                "edit", "Run this call instead.", edited_action={"$ref": "#/$defs/EditedAction"}
            )
        elif kind in _FIXED:
            defs[f"{kind.capitalize()}Decision"] = _FIXED[kind]
        else:
            continue
        refs[kind] = f"#/$defs/{kind.capitalize()}Decision"
    if len(refs) == 1:
        (kind,) = refs
        only = dict(defs.pop(f"{kind.capitalize()}Decision"))
        return {**only, "$defs": defs} if defs else only
    return {
        "$defs": defs,
        "discriminator": {"mapping": refs, "propertyName": "type"},
        "oneOf": [{"$ref": ref} for ref in refs.values()],
    }


def _args_schema(name: str, tool: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The tool's argument schema, kept under its name (its own ``$defs`` joined to ours)."""
    schema = getattr(tool, "json_schema", None)
    if not isinstance(schema, Mapping):
        return {"type": "object"}
    own = dict(schema)
    defs.update(own.pop("$defs", {}))
    description = getattr(tool, "description", None)
    defs[name] = {**({"description": description} if description else {}), **own, "title": name}
    return {"$ref": f"#/$defs/{name}"}
