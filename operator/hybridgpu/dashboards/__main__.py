"""``python -m hybridgpu.dashboards [ROOT]``: write the dashboards and alert rules into the
chart under ROOT (default: the current directory, the repository root)."""

from __future__ import annotations

import sys
from pathlib import Path

from hybridgpu.dashboards import write


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path.cwd()
    for path in write(root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
