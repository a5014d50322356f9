"""Live progress on stderr: done/total, rate, ETA, at most once a second.

On a terminal the line is rewritten in place; otherwise (a log file, CI) one
line is written every ``every`` seconds, so a long drain is never silent.
Printed whatever the verbosity: a load tester watching a run needs it most.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    def __init__(
        self, label: str, total: int, *, stream: TextIO | None = None, every: float | None = None
    ) -> None:
        self.label = label
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every if every is not None else (1.0 if self.tty else 5.0)
        self.started = time.monotonic()
        self._last_print = 0.0
        self._done = 0

    def line(self, done: int, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed
        left = max(self.total - done, 0)
        eta = f"{left / rate:,.0f} s" if rate > 0 and left else ("0 s" if not left else "?")
        pct = done / self.total * 100 if self.total else 100.0
        return (
            f"{self.label}: {done:,}/{self.total:,} ({pct:.1f}%) "
            f"{rate:,.0f}/s, {elapsed:,.0f} s elapsed, ETA {eta}"
        )

    def update(self, done: int, *, force: bool = False) -> None:
        self._done = done
        now = time.monotonic()
        if not force and now - self._last_print < self.every:
            return
        self._last_print = now
        text = self.line(done, now)
        if self.tty:
            self.stream.write("\r" + text + "\033[K")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """The final figures, on a line of their own."""
        self.update(self._done, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
