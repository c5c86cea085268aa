"""Watches declared once: each store's `Mirror` names its resource and its label and field selectors, and from it
come the kopf event handler that feeds the mirror, the handler's label filter, and the selectors the API server
applies to the watch and its lists (`controller.WatchSelectors`).

A field selector has no client-side twin: the API server alone applies it. None is needed, because an object that
leaves a watch's selection is reported as a deletion carrying the object as it was before, which still matched.

The handlers are `async` (they do no I/O) so that they run on the event loop thread, like the reconciler that
reads the stores and the work queue they feed; kopf would run sync ones in threads."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

import kopf

from . import controller, stores

Key = TypeVar("Key", bound=Hashable)
#: What else an event of a resource touches, besides what its mirror says (by plural): (body, deleted) → keys.
Also = Callable[[kopf.Body, bool], list[Key]]


def label_filter(selector: str | None) -> dict[str, Any]:
    """kopf's `labels=` filter for a label selector of the forms the stores use: `key`, `key=value` and
    `key in (a,b)`, comma-separated outside parentheses."""
    found: dict[str, Any] = {}
    for term in _terms(selector or ""):
        if " in (" in term:
            key, _, values = term.partition(" in (")
            allowed = frozenset(value.strip() for value in values.rstrip(")").split(","))
            found[key.strip()] = _one_of(allowed)
        elif "=" in term:
            key, _, value = term.partition("=")
            found[key.strip()] = value.strip()
        else:
            found[term.strip()] = kopf.PRESENT
    return found


def _terms(selector: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for at, char in enumerate(selector):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(selector[start:at])
            start = at + 1
    terms.append(selector[start:])
    return [term for term in terms if term.strip()]


def _one_of(allowed: frozenset[str]) -> Callable[..., bool]:
    def matches(value: str | None, **_: Any) -> bool:
        return value in allowed

    return matches


def selector_key(resource: stores.Resource) -> str | tuple[str, str, str]:
    """How kopf's settings name `resource`: the plural of a core resource, else (group, version, plural)."""
    group, _, version = resource.api_version.rpartition("/")
    return resource.plural if not group else (group, version, resource.plural)


def register(
    registry: kopf.OperatorRegistry,
    mirrors: Sequence[stores.Mirror[Key]],
    enqueue: Callable[[list[Key]], None],
    *,
    also: Mapping[str, Also[Key]] | None = None,
) -> controller.WatchSelectors:
    """One kopf event handler per mirror (its id the resource's plural), each feeding its mirror and queueing the
    keys the event touched; returns the selectors of the watches that have any."""
    selectors: dict[str | tuple[str, str, str], controller.WatchSelector] = {}
    for mirror in mirrors:
        resource = mirror.resource
        group, _, version = resource.api_version.rpartition("/")
        kopf.on.event(
            group,
            version,
            resource.plural,
            labels=label_filter(resource.label_selector) or None,
            id=resource.plural,
            registry=registry,
        )(_handler(mirror, enqueue, (also or {}).get(resource.plural)))
        if resource.label_selector or resource.field_selector:
            selectors[selector_key(resource)] = controller.WatchSelector(
                labels=resource.label_selector, fields=resource.field_selector
            )
    return selectors


def _handler(
    mirror: stores.Mirror[Key], enqueue: Callable[[list[Key]], None], also: Also[Key] | None
) -> Callable[..., Any]:
    async def on_event(body: kopf.Body, type: str, **_: Any) -> None:
        deleted = type == "DELETED"
        touched = mirror.observe(body, deleted=deleted)
        if also is not None:
            touched += also(body, deleted)
        enqueue(touched)

    return on_event
