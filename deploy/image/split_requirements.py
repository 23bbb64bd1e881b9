"""Image build: pyproject.toml's dependencies as two requirement files, by how they install.

`no-deps.txt` lists those installed without their own dependencies: litellm, of which the
proxy reads only data files (keep_needed.py), and tokenizers, whose one dependency (the
Hugging Face hub's client) only downloads tokenizers, which the proxy never does (it loads
a local tokenizer.json). `runtime.txt` lists the rest, installed as declared. Reads
`pyproject.toml` in the folder given (the current one by default) and writes both there.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

NO_DEPS = ("litellm", "tokenizers")


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    declared = tomllib.loads((folder / "pyproject.toml").read_text())["project"]["dependencies"]

    def name(requirement: str) -> str:
        return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()

    alone = [r for r in declared if name(r) in NO_DEPS]
    if sorted(name(r) for r in alone) != sorted(NO_DEPS):
        print(f"pyproject.toml: expected one dependency each on {NO_DEPS}", file=sys.stderr)
        return 1
    (folder / "runtime.txt").write_text("".join(f"{r}\n" for r in declared if r not in alone))
    (folder / "no-deps.txt").write_text("".join(f"{r}\n" for r in alone))
    return 0


if __name__ == "__main__":
    sys.exit(main())
