"""Reading the `auto-compute-domain` annotations: `enabled`, `disabled`, or unset — nothing else."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from .. import errors, keys


class OptIn(enum.Enum):
    ENABLED = keys.OPT_IN_ENABLED
    DISABLED = keys.OPT_IN_DISABLED


def read_opt_in(annotations: Mapping[str, str], key: str, *, path: str = "") -> OptIn | errors.FieldError | None:
    """The annotation's value, `None` when unset, or a field error naming the key, the value and the choices.

    `path` is where the annotations live (`""` for the object's own, `spec.roles[1]` for a role).
    Values are matched exactly: `true`, `Enabled` or ` enabled` are errors, not guesses.
    """
    value = annotations.get(key)
    if value is None:
        return None
    for choice in OptIn:
        if value == choice.value:
            return choice
    return errors.unsupported(errors.annotation_path(path, key), value, keys.OPT_IN_VALUES, "or remove the annotation")


def is_opted_in(annotations: Mapping[str, str], key: str) -> bool:
    """True only for a valid `enabled`; unset, `disabled` and invalid values all mean no."""
    return read_opt_in(annotations, key) is OptIn.ENABLED
