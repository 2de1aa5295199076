#!/usr/bin/env python3
"""Regenerate README.md's "What it changes" table from the patches' anchor tables.

python3 scripts/docs_tables.py          # rewrite README.md
python3 scripts/docs_tables.py --check  # exit 1 if README.md is out of date
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sm120patch.patcher.render.docs import patch_table_markdown  # noqa: E402

BEGIN, END = "<!-- patch-table:begin -->", "<!-- patch-table:end -->"


def updated(readme: str) -> str:
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{patch_table_markdown()}\n{END}{tail}"


def main() -> int:
    path = REPO / "README.md"
    text = path.read_text()
    new = updated(text)
    if "--check" in sys.argv:
        return 0 if new == text else 1
    path.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
