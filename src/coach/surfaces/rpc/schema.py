"""One JSON Schema for every method and stream message: what ``web/src/rpc.ts`` is generated
from (``make rpc-types`` runs ``python -m coach.surfaces.rpc``)."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaMode

from ..room import StateMessage, StepMessage
from .contract import ERRORS, RpcRequest
from .registry import METHODS


def json_schema() -> dict[str, Any]:
    """One JSON Schema for every method's request and response (what ``web/src/rpc.ts``
    is generated from): ``CoachRpc`` maps each method name to its two types."""
    models = sorted(
        {m for entry in METHODS.values() for m in (entry.request, entry.response)},
        key=lambda m: m.__name__,
    )
    defs: dict[str, Any] = {}
    for model in models:
        mode: JsonSchemaMode = "validation" if issubclass(model, RpcRequest) else "serialization"
        schema = model.model_json_schema(ref_template="#/$defs/{model}", mode=mode)
        defs.update(schema.pop("$defs", {}))
        defs[model.__name__] = schema
    streams: tuple[tuple[str, str, TypeAdapter[Any]], ...] = (
        ("StateMessage", "coach.state", TypeAdapter(StateMessage)),
        ("StepMessage", "coach.steps", TypeAdapter(StepMessage)),
    )
    for name, topic, adapter in streams:
        stream = adapter.json_schema(ref_template="#/$defs/{model}", mode="serialization")
        defs.update(stream.pop("$defs", {}))
        defs[name] = {
            "title": name,
            "description": f"A message on the text stream topic `{topic}`.",
            **stream,
        }
    for schema in defs.values():
        for field in schema.get("properties", {}).values():
            _untitled(field)
    defs["RpcErrorCode"] = {
        "title": "RpcErrorCode",
        "description": "The code of an RpcError: "
        + "; ".join(f"{code} {meaning}" for code, meaning in ERRORS.items())
        + ".",
        "enum": sorted(ERRORS),
    }
    methods = {
        name: {
            "type": "object",
            "properties": {
                "request": {"$ref": f"#/$defs/{entry.request.__name__}"},
                "response": {"$ref": f"#/$defs/{entry.response.__name__}"},
            },
            "required": ["request", "response"],
            "additionalProperties": False,
        }
        for name, entry in sorted(METHODS.items())
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "CoachRpc",
        "description": "The RPC methods of the coach agent participant (generated).",
        "type": "object",
        "properties": methods,
        "required": sorted(methods),
        "additionalProperties": False,
        "$defs": defs,
    }


def _untitled(schema: dict[str, Any]) -> None:
    """Drop pydantic's per-field titles: TypeScript then inlines each field's type
    instead of naming an alias after it (``SessionId1``, ``SessionId2``, ...)."""
    schema.pop("title", None)
    for part in schema.get("anyOf", []):
        _untitled(part)
    if isinstance(schema.get("items"), dict):
        _untitled(schema["items"])
