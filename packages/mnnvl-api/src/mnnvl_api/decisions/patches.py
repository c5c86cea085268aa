"""JSON patches (RFC 6902) as the decisions build them: the type, pointers, and setting one annotation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

JsonPatch = list[dict[str, Any]]


def pointer(*parts: str) -> str:
    """A JSON pointer to `parts`, each escaped."""
    return "/" + "/".join(part.replace("~", "~0").replace("/", "~1") for part in parts)


def set_annotation(meta: Mapping[str, Any], key: str, value: str) -> JsonPatch:
    """Operations that set annotation `key` of an object whose metadata reads `meta`, whether it has annotations
    or none yet (`add` under a missing map fails, and `add` of the whole map would drop the others)."""
    if meta.get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": {key: value}}]
    return [{"op": "add", "path": pointer("metadata", "annotations", key), "value": value}]
