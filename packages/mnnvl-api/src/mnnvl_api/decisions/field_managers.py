"""Who may write as one of mnnvl's field managers.

A domain is ours when the API server records our field manager as the only owner of its identity labels
(`domains.identity_owner`). The field manager of a request is whatever the request names (`fieldManager`) or, if
it names none, its user agent: anyone allowed to write ComputeDomains could name ours. The API server records
the request's manager in `metadata.managedFields` before admission, so a validating webhook sees in the object
whether this request wrote as a manager, and refuses it when the requester is not that manager's own process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: One managedFields entry, as (operation, subresource).
EntryKey = tuple[str, str]


def _paths(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every field path in a `fieldsV1` tree."""
    found = set()
    for key, child in tree.items():
        path = (*prefix, key)
        found.add(path)
        if isinstance(child, Mapping):
            found |= _paths(child, path)
    return found


def _entries(meta: Mapping[str, Any] | None, manager: str) -> dict[EntryKey, tuple[str, set[tuple[str, ...]]]]:
    """`manager`'s managedFields entries: their time and the paths they own."""
    return {
        (str(entry.get("operation")), str(entry.get("subresource") or "")): (
            str(entry.get("time") or ""),
            _paths(entry.get("fieldsV1") or {}),
        )
        for entry in (meta or {}).get("managedFields") or ()
        if entry.get("manager") == manager
    }


def wrote_as(manager: str, meta: Mapping[str, Any], old_meta: Mapping[str, Any] | None) -> bool:
    """Whether the request that turned `old_meta` (None: a creation) into `meta` wrote as `manager`: the API server
    gave `manager` an entry, a new time (it changed fields), or fields it did not own. Losing fields to another
    manager is not writing as it."""
    before = _entries(old_meta, manager)
    for key, (time, paths) in _entries(meta, manager).items():
        if key not in before or time != before[key][0] or not paths <= before[key][1]:
            return True
    return False


def impersonation_refusal(
    manager: str, *, requester: str, own_user: str, meta: Mapping[str, Any], old_meta: Mapping[str, Any] | None
) -> str | None:
    """Why a write of a ComputeDomain is refused (None: it is not): it writes as `manager`, which only `own_user`
    (the identity `manager`'s process runs as) may do. Otherwise a domain anyone made would pass for one that
    `manager` created, and `manager` would manage, release and delete it as its own."""
    if requester == own_user or not wrote_as(manager, meta, old_meta):
        return None
    return (
        f'metadata.managedFields: Forbidden: only {manager} (user "{own_user}") may write a ComputeDomain as field '
        f'manager "{manager}", not user "{requester}"; use another field manager (kubectl --field-manager, or the '
        "client's fieldManager option), or a user agent other than "
        f'"{manager}"'
    )
