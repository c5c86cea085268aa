"""docs/install.md documents every value of the chart."""

from __future__ import annotations

from typing import Any

import yaml

from mnnvl_testbed import chart

CONTROLLER_BLOCKS = ("lws", "ds", "guardian", "topology")
INSTALL_DOC = chart.CHART_DIR.parents[1] / "docs" / "install.md"


def undocumented(path: str, value: Any, doc: str) -> list[str]:
    """`path` when neither it nor (for a map) each of its keys is in the doc as `code`; a controller block's keys
    are documented once as `<controller>.key`."""
    head, _, rest = path.partition(".")
    block = head in CONTROLLER_BLOCKS
    spellings = {path, f"<controller>.{rest}"} if block and rest else {path}
    # A block's name alone documents none of its keys.
    if any(f"`{spelling}`" in doc for spelling in spellings) and not (block and not rest):
        return []
    if isinstance(value, dict) and value:
        return [missing for key, item in value.items() for missing in undocumented(f"{path}.{key}", item, doc)]
    return [path]


def test_every_value_is_documented_in_install_md() -> None:
    values = yaml.safe_load((chart.CHART_DIR / "values.yaml").read_text())
    doc = INSTALL_DOC.read_text()
    missing = [item for key, value in values.items() for item in undocumented(key, value, doc)]
    assert missing == []
