"""Write vakit_client/client.py from vakit_client/async_client.py.

The two clients have the same operations; only the asyncio of one differs.
As psycopg does, the async one is the source and the sync one is made from
it by taking the asyncio out, so an operation, its signature and its
docstring are written once. tests/unit/test_python_sdk.py fails when the
committed client.py is not what this writes.

    python clients/python/tools/async_to_sync.py     # after editing async_client.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

__all__ = ["HERE", "sync_source"]

HERE = Path(__file__).resolve().parents[1] / "vakit_client"

# In order: the longer names before the words they contain.
_RULES: list[tuple[str, str]] = [
    (r"async def __aenter__\(self\) -> AsyncClient", "def __enter__(self) -> Client"),
    (r"async def __aexit__", "def __exit__"),
    (r"await self\.aclose\(\)", "self.close()"),
    (r"async def aclose", "def close"),
    (r"await self\._http\.aclose\(\)", "self._http.close()"),
    (r"await asyncio\.sleep\(", "time.sleep("),
    (r"^import asyncio$", "import time"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncClient\b", "Client"),
    (r"\basync (def|for|with)\b", r"\1"),
    (r"\bawait ", ""),
    # An async generator cannot `yield from`; a sync one does.
    (r"for (\w+) in (.+):\n\s+yield \1$", r"yield from \2"),
]

HEADER = (
    "# Written by clients/python/tools/async_to_sync.py from async_client.py:\n"
    "# edit that file and run the tool, not this one.\n"
)


def sync_source(text: str) -> str:
    """The sync client's module, from the async client's."""
    start = text.index('"""', 3) + 3  # the async module's docstring, replaced
    doc = (
        '"""The synchronous client: :class:`~vakit_client.AsyncClient`\'s operations\n'
        'without asyncio (the searches are plain iterators)."""'
    )
    body = text[start:]
    for pattern, replacement in _RULES:
        body = re.sub(pattern, replacement, body, flags=re.MULTILINE)
    # Lines that lost their `await` may fit on one line now: the formatter
    # the repository uses decides, as it would for a hand-written file.
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(HERE / "client.py"), "-"],
        input=HEADER + "\n" + doc + body,
        capture_output=True,
        text=True,
        check=True,
    )
    return formatted.stdout


def main() -> None:
    target = HERE / "client.py"
    target.write_text(sync_source((HERE / "async_client.py").read_text()))
    print(f"wrote {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
