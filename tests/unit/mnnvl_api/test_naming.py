from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnnvl_api import names

DNS_LABEL_CHARS = string.ascii_lowercase + string.digits + "-"
lws_names = st.from_regex(r"[a-z]([-a-z0-9]{0,251}[a-z0-9])?", fullmatch=True)
tokens = st.text(names.INCARNATION_TOKEN_ALPHABET, min_size=5, max_size=5)
any_text = st.text(min_size=1, max_size=300)


@pytest.mark.parametrize(
    ("lws", "group", "token", "expected"),
    [
        pytest.param("deepseek-r1", 0, "x7k2b", "deepseek-r1-0-x7k2b", id="short-name-kept-whole"),
        pytest.param("deepseek-r1", 12, "x7k2b", "deepseek-r1-12-x7k2b", id="group-index-in-name"),
    ],
)
def test_short_replica_names_are_the_parts_joined(lws: str, group: int, token: str, expected: str) -> None:
    assert names.replica_domain_name(lws, group, token) == expected


def test_a_long_name_keeps_its_start_and_its_position_parts_and_gains_a_hash() -> None:
    lws = "a-very-long-leaderworkerset-name-for-the-deepseek-r1-disaggregated-prefill-stage"
    name = names.replica_domain_name(lws, 3, "x7k2b")
    assert len(name) == 63
    assert name == "a-very-long-leaderworkerset-name-for-the-deeps-3-x7k2b-" + name[-8:]
    head, group, token, digest = name.rsplit("-", 3)
    assert (group, token) == ("3", "x7k2b")
    assert len(digest) == names.HASH_LENGTH
    assert all(c in string.hexdigits for c in digest)
    assert lws.startswith(head)


def test_slice_names_carry_slice_and_revision() -> None:
    assert names.slice_domain_name("llm-serving", 1, "3f9a0c2e") == "llm-serving-1-3f9a0c2e"


def test_claim_template_name_is_the_domain_name_with_a_channel_suffix() -> None:
    assert names.claim_template_name("deepseek-r1-0-x7k2b") == "deepseek-r1-0-x7k2b-channel"


def test_a_63_character_domain_still_yields_a_valid_distinct_claim_template_name() -> None:
    domain = names.replica_domain_name("n" * 80, 0, "x7k2b")
    template = names.claim_template_name(domain)
    assert names.is_dns1123_label(template)
    assert template != domain
    assert template.endswith("-channel-" + template.rsplit("-", 1)[1])


def test_characters_a_label_cannot_hold_are_replaced_and_the_name_hashed() -> None:
    name = names.fit_label("My.Set", "0")
    assert names.is_dns1123_label(name)
    assert name.startswith("my-set-0-")
    assert name != names.fit_label("my-set", "0")


@given(lws=lws_names, group=st.integers(min_value=0, max_value=10**7), token=tokens)
def test_replica_names_are_always_valid_labels(lws: str, group: int, token: str) -> None:
    assert names.is_dns1123_label(names.replica_domain_name(lws, group, token))


@given(head=any_text, tail=st.lists(any_text, max_size=3))
def test_any_input_yields_a_valid_label(head: str, tail: list[str]) -> None:
    assert names.is_dns1123_label(names.fit_label(head, *tail))


@given(lws=lws_names, group=st.integers(min_value=0, max_value=999), token=tokens)
def test_names_are_deterministic(lws: str, group: int, token: str) -> None:
    assert names.replica_domain_name(lws, group, token) == names.replica_domain_name(lws, group, token)


@given(
    stem=st.text(DNS_LABEL_CHARS[:26], min_size=60, max_size=120),
    ends=st.lists(st.text(string.ascii_lowercase, min_size=1, max_size=8), min_size=2, max_size=2, unique=True),
    group=st.integers(min_value=0, max_value=99),
    token=tokens,
)
def test_long_names_that_differ_only_at_the_end_never_collide(
    stem: str, ends: list[str], group: int, token: str
) -> None:
    first, second = (names.replica_domain_name(stem + end, group, token) for end in ends)
    assert first != second


@given(lws=lws_names, groups=st.lists(st.integers(0, 999), min_size=2, max_size=2, unique=True), token=tokens)
def test_different_groups_never_share_a_name(lws: str, groups: list[int], token: str) -> None:
    assert names.replica_domain_name(lws, groups[0], token) != names.replica_domain_name(lws, groups[1], token)


@given(lws=lws_names, group=st.integers(0, 999), token_pair=st.lists(tokens, min_size=2, max_size=2, unique=True))
def test_incarnations_of_one_group_never_share_a_name(lws: str, group: int, token_pair: list[str]) -> None:
    first, second = (names.replica_domain_name(lws, group, token) for token in token_pair)
    assert first != second


@given(token=st.text(min_size=0, max_size=8))
def test_incarnation_tokens_are_five_characters_of_the_alphabet(token: str) -> None:
    expected = len(token) == 5 and set(token) <= set(names.INCARNATION_TOKEN_ALPHABET)
    assert names.is_incarnation_token(token) is expected


@pytest.mark.parametrize(
    ("domain", "lws", "group", "token"),
    [
        pytest.param("deepseek-r1-0-x7k2b", "deepseek-r1", 0, "x7k2b", id="derived"),
        pytest.param(names.replica_domain_name("a" * 70, 3, "bbbbb"), "a" * 70, 3, "bbbbb", id="shortened-and-hashed"),
        pytest.param("deepseek-r1-1-x7k2b", "deepseek-r1", 0, None, id="other-group"),
        pytest.param("other-0-x7k2b", "deepseek-r1", 0, None, id="other-workload"),
        pytest.param("deepseek-r1-0-aaaaa", "deepseek-r1", 0, None, id="not-a-token"),
        pytest.param("NOT A NAME!!", "deepseek-r1", 0, None, id="not-a-name"),
    ],
)
def test_a_replica_domain_name_is_recognised_only_when_derived(
    domain: str, lws: str, group: int, token: str | None
) -> None:
    assert names.replica_domain_token(domain, lws, group) == token


revisions = st.text("0123456789abcdef", min_size=8, max_size=8)


@given(ds=lws_names, slice_index=st.integers(min_value=0, max_value=99), revision=revisions)
def test_slice_names_are_always_valid_labels_that_keep_slice_and_revision_whole(
    ds: str, slice_index: int, revision: str
) -> None:
    name = names.slice_domain_name(ds, slice_index, revision)
    assert names.is_dns1123_label(name)
    assert f"-{slice_index}-{revision}" in name
    assert names.is_dns1123_label(names.claim_template_name(name))


@given(
    ds=lws_names,
    positions=st.lists(st.tuples(st.integers(0, 99), revisions), min_size=2, max_size=2, unique=True),
)
def test_different_slices_or_revisions_never_share_a_name(ds: str, positions: list[tuple[int, str]]) -> None:
    first, second = (names.slice_domain_name(ds, *position) for position in positions)
    assert first != second
