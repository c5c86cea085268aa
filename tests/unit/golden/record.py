"""Re-record the golden files: `python -m tests.unit.golden.record [shape ...]` (all shapes by default).

Only for a deliberate change of what mnnvl stamps (or a new shape), made together with docs/upgrades.md: a
changed record means running workloads restart when users upgrade. The tests never write these files.
"""

from __future__ import annotations

import sys

from tests.unit.golden import shapes


def main(names: list[str]) -> int:
    known = {shape.name: shape for shape in shapes.SHAPES}
    unknown = sorted(set(names) - set(known))
    if unknown:
        print(f"unknown shapes {unknown}; known: {sorted(known)}", file=sys.stderr)
        return 2
    shapes.RECORDED_DIR.mkdir(exist_ok=True)
    for name in names or list(known):
        shape = known[name]
        text = shapes.render(shape)
        changed = not shape.recorded_path.exists() or shape.recorded_path.read_text() != text
        shape.recorded_path.write_text(text)
        print(f"{'re-recorded' if changed else 'unchanged  '} {shape.recorded_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
