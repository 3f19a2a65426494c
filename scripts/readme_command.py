"""Print one of the README's two set-up commands exactly as written, for CI to run verbatim.

``python3 scripts/readme_command.py tests`` prints the command under "Run the tests" (the second
``sh`` block of the README's "## Set up" section), ``demo`` the one that runs the main job (the
first). CI runs what this prints, so the README and CI cannot drift apart.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)
WHICH = {"demo": 0, "tests": 1}


def set_up_commands(text: str) -> list[str]:
    """The ``sh`` blocks of the "## Set up" section, each stripped."""
    section = text.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in BLOCK.findall(section)]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in WHICH:
        print("usage: readme_command.py demo|tests", file=sys.stderr)
        return 2
    commands = set_up_commands(README.read_text(encoding="utf-8"))
    print(commands[WHICH[argv[0]]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
