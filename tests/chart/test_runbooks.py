"""Every alert of the PrometheusRule links its own section of docs/troubleshooting.md."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mnnvl_testbed import chart

from .conftest import Render, one

TROUBLESHOOTING = chart.CHART_DIR.parents[1] / "docs" / "troubleshooting.md"
RUNBOOKS = "https://github.com/mnnvl/mnnvl/blob/main/docs/troubleshooting.md"
ALERTS_ON = {"metrics": {"prometheusRule": {"enabled": True}}}
HEADING = re.compile(r"^#{1,6} +(.+?) *#* *$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped (code marks too), spaces as
    hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of every heading outside code blocks, a repeated one numbered as GitHub numbers it."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_code = not in_code
            continue
        heading = None if in_code else HEADING.match(line)
        if heading is None:
            continue
        anchor = github_anchor(heading.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def test_github_anchors_are_computed_as_github_does() -> None:
    assert github_anchor("Webhook calls time out (context deadline exceeded)") == (
        "webhook-calls-time-out-context-deadline-exceeded"
    )
    assert github_anchor("Certificates (`certs.mode`)") == "certificates-certsmode"
    assert github_anchor("NVIDIA's driver under bursts of groups") == "nvidias-driver-under-bursts-of-groups"
    assert anchors("# A\n```\n# not a heading\n```\n## A\n### B #\n") == {"a", "a-1", "b"}


def alert_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rule = one(objects, "PrometheusRule", "mnnvl-alerts")
    return [item for group in rule["spec"]["groups"] for item in group["rules"] if "alert" in item]


def test_every_alert_links_its_section_of_the_troubleshooting_page(render: Render) -> None:
    sections = anchors(TROUBLESHOOTING.read_text())
    rules = alert_rules(render(overrides=ALERTS_ON))
    assert rules
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page == RUNBOOKS, rule["alert"]
        # Each alert has a section of its own, titled with its name.
        assert anchor == github_anchor(rule["alert"]), rule["alert"]
        assert anchor in sections, f"{rule['alert']}: no heading of docs/troubleshooting.md has the anchor {anchor}"


def test_the_runbook_page_can_be_your_own(render: Render) -> None:
    mine = "https://wiki.example.com/mnnvl/troubleshooting"
    overrides = {"metrics": {"prometheusRule": {"enabled": True, "runbookBaseUrl": mine}}}
    urls = {rule["annotations"]["runbook_url"] for rule in alert_rules(render(overrides=overrides))}
    assert urls
    assert all(url.startswith(mine + "#") for url in urls)


@pytest.mark.parametrize(
    "url", ["wiki.example.com/mnnvl", "https://wiki.example.com/mnnvl#alerts"], ids=["no-scheme", "with-anchor"]
)
def test_a_runbook_page_without_a_scheme_or_with_an_anchor_is_refused(render: Render, url: str) -> None:
    # Each alert appends its own anchor, so the page's URL must not carry one.
    with pytest.raises(chart.RenderError) as refused:
        render(overrides={"metrics": {"prometheusRule": {"enabled": True, "runbookBaseUrl": url}}})
    assert "at '/metrics/prometheusRule/runbookBaseUrl'" in str(refused.value)
    assert "does not match pattern" in str(refused.value)


def test_every_link_of_the_troubleshooting_page_reaches_a_heading() -> None:
    """Links to its own sections and to other pages' sections (`page.md#anchor`) land on a heading."""
    text = TROUBLESHOOTING.read_text()
    links = re.findall(r"\]\(([\w./-]*)#([^)]+)\)", text)
    assert {page for page, _ in links} >= {"", "install.md"}
    broken = [
        f"{page}#{anchor}"
        for page, anchor in links
        if anchor not in anchors((TROUBLESHOOTING.parent / page).read_text() if page else text)
    ]
    assert broken == []
