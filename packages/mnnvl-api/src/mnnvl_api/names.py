"""Names of the objects mnnvl creates: always valid DNS-1123 labels (at most 63 characters).

A name keeps the workload name readable and its trailing position parts (group index, incarnation token,
slice, revision) whole. When the workload name has to be shortened, or contained characters a label cannot
hold, a hash of the full input is appended, so two inputs that differ only in what was cut never collide.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

MAX_LABEL_LENGTH: Final = 63
HASH_LENGTH: Final = 8
INCARNATION_TOKEN_LENGTH: Final = 5
#: Characters of incarnation tokens: no vowels, as Kubernetes' generateName, so tokens never spell words.
INCARNATION_TOKEN_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
CLAIM_TEMPLATE_SUFFIX: Final = "channel"

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_SUBDOMAIN_LENGTH: Final = 253
_NOT_LABEL_CHARACTERS = re.compile(r"[^a-z0-9-]+")


def is_dns1123_label(value: str) -> bool:
    return len(value) <= MAX_LABEL_LENGTH and _DNS1123_LABEL.match(value) is not None


def is_dns1123_subdomain(value: str) -> bool:
    """A name most kinds accept (a pod's, a Topology's): dot-separated labels, at most 253 characters."""
    return len(value) <= MAX_SUBDOMAIN_LENGTH and _DNS1123_SUBDOMAIN.match(value) is not None


def is_incarnation_token(value: str) -> bool:
    return len(value) == INCARNATION_TOKEN_LENGTH and all(c in INCARNATION_TOKEN_ALPHABET for c in value)


def replica_domain_name(lws_name: str, group_index: int, incarnation_token: str) -> str:
    """The ComputeDomain of one leader incarnation of one LeaderWorkerSet group."""
    return fit_label(lws_name, str(group_index), incarnation_token)


def replica_domain_token(domain: str, lws_name: str, group_index: int) -> str | None:
    """The incarnation token of `domain` when it is exactly what `replica_domain_name` derives for this LWS group
    (with some token), else None: a name anyone may write on a pod is trusted only when it is one we derive."""
    for token in domain.split("-")[-2:]:  # the token is last, or second to last when a hash follows
        if is_incarnation_token(token) and replica_domain_name(lws_name, group_index, token) == domain:
            return token
    return None


def slice_domain_name(ds_name: str, slice_index: int, revision: str) -> str:
    """The ComputeDomain of one (slice, revision) of a DisaggregatedSet."""
    return fit_label(ds_name, str(slice_index), revision)


def claim_template_name(domain_name: str) -> str:
    """The ResourceClaimTemplate the NVIDIA driver creates for a managed ComputeDomain."""
    return fit_label(domain_name, CLAIM_TEMPLATE_SUFFIX)


def fit_label(head: str, *tail: str) -> str:
    """`head-tail1-tail2…` as a DNS-1123 label: `head` is shortened (never the tail) and hashed when needed."""
    full = "-".join((head, *tail))
    clean_head = _clean(head)
    clean_tail = [_clean(part) for part in tail]
    clean = "-".join(part for part in (clean_head, *clean_tail) if part)
    if clean == full and is_dns1123_label(clean):
        return clean
    digest = hashlib.sha256(full.encode()).hexdigest()[:HASH_LENGTH]
    suffix = "-".join(part for part in (*clean_tail, digest) if part)
    budget = MAX_LABEL_LENGTH - len(suffix) - 1
    if budget < 1:  # the tail alone is too long to keep whole: keep what fits of everything
        kept = _trim(clean[: MAX_LABEL_LENGTH - HASH_LENGTH - 1])
        return f"{kept}-{digest}" if kept else digest
    shortened_head = _trim(clean_head[:budget])
    return f"{shortened_head}-{suffix}" if shortened_head else suffix


def _clean(part: str) -> str:
    return _trim(_NOT_LABEL_CHARACTERS.sub("-", part.lower()))


def _trim(part: str) -> str:
    return part.strip("-")
