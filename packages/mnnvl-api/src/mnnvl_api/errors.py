"""Field errors in the shape Kubernetes' own validation uses, so admission messages read like the API server's.

<path>: Invalid value: "<value>": <why>; <fix>
<path>: Unsupported value: "<value>": supported values: "a", "b"; <fix>
<path>: Forbidden: <why>; <fix>
"""

from __future__ import annotations

import dataclasses
import enum
import json


class FieldErrorType(enum.Enum):
    INVALID = "Invalid value"
    UNSUPPORTED = "Unsupported value"
    FORBIDDEN = "Forbidden"
    REQUIRED = "Required value"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FieldError:
    """One problem with one field of an object, and how to fix it."""

    type: FieldErrorType
    path: str
    detail: str
    value: str | None = None

    def __str__(self) -> str:
        if self.type is FieldErrorType.FORBIDDEN or self.type is FieldErrorType.REQUIRED or self.value is None:
            return f"{self.path}: {self.type.value}: {self.detail}"
        return f"{self.path}: {self.type.value}: {json.dumps(self.value)}: {self.detail}"


def invalid(path: str, value: str, detail: str) -> FieldError:
    return FieldError(type=FieldErrorType.INVALID, path=path, value=value, detail=detail)


def unsupported(path: str, value: str, supported: tuple[str, ...], fix: str) -> FieldError:
    listed = ", ".join(json.dumps(option) for option in supported)
    return FieldError(
        type=FieldErrorType.UNSUPPORTED, path=path, value=value, detail=f"supported values: {listed}; {fix}"
    )


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(type=FieldErrorType.FORBIDDEN, path=path, detail=detail)


def annotation_path(prefix: str, key: str) -> str:
    """`metadata.annotations[key]` under `prefix` (empty for the object itself)."""
    return f"{prefix}.metadata.annotations[{key}]" if prefix else f"metadata.annotations[{key}]"


def join(field_errors: list[FieldError]) -> str:
    """All errors as one admission message, as Kubernetes aggregates a field.ErrorList."""
    if len(field_errors) == 1:
        return str(field_errors[0])
    return "[" + ", ".join(str(error) for error in field_errors) + "]"
