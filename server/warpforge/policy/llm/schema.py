"""Structured outputs: tool definitions and a strict validator for the JSON Schema subset they use.

Why validate locally even with ``strict: true`` tools: the guarantee holds only for models and endpoints
that implement it, a stream can be cut mid-object, and a wrong shape must become a clear, recorded
failure (fed back to the model once) rather than a ``KeyError`` deep in the policy. The subset is small
on purpose — objects with required properties and no extras, arrays, strings, integers, numbers,
booleans, enums — which is also what strict tool schemas accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model calls to return structured data (or to ask for something, like SEARCH_DOCS)."""

    name: str
    description: str
    schema: Mapping[str, Any]

    def param(self, *, strict: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "description": self.description,
                               "input_schema": dict(self.schema)}
        if strict:
            out["strict"] = True
        return out


def obj(properties: Mapping[str, Any], description: str = "") -> dict[str, Any]:
    """An object schema where every property is required and nothing else is allowed (strict form)."""
    out: dict[str, Any] = {"type": "object", "properties": dict(properties), "required": list(properties),
                           "additionalProperties": False}
    if description:
        out["description"] = description
    return out


def string(description: str = "", enum: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "string"}
    if description:
        out["description"] = description
    if enum:
        out["enum"] = list(enum)
    return out


def array(items: Mapping[str, Any], description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "array", "items": dict(items)}
    if description:
        out["description"] = description
    return out


def integer(description: str = "") -> dict[str, Any]:
    return {"type": "integer", "description": description} if description else {"type": "integer"}


def number(description: str = "") -> dict[str, Any]:
    return {"type": "number", "description": description} if description else {"type": "number"}


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
}


def validate(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Every way ``value`` violates ``schema`` (empty: valid), each as ``path: what``."""
    errors: list[str] = []
    types = schema.get("type")
    type_list = [types] if isinstance(types, str) else list(types or [])
    if type_list and not any(_is_type(value, t) for t in type_list):
        return [f"{path}: expected {' or '.join(type_list)}, got {_describe(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {', '.join(map(repr, schema['enum']))}")
    if isinstance(value, dict):
        props: Mapping[str, Any] = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                errors.append(f"{path}: missing required property `{name}`")
        if schema.get("additionalProperties") is False:
            for name in value:
                if name not in props:
                    errors.append(f"{path}: unexpected property `{name}`")
        for name, sub in props.items():
            if name in value:
                errors.extend(validate(value[name], sub, f"{path}.{name}"))
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                errors.extend(validate(item, items, f"{path}[{i}]"))
    return errors


def _is_type(value: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "null":
        return value is None
    return isinstance(value, _TYPES.get(t, (object,)))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string", int: "integer", float: "number"}.get(
        type(value), type(value).__name__)
