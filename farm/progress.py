"""Progress lines for long steps (toolkit download, source fetch, lint, audit, downloads).

Plain lines on stderr, one per event, so a terminal shows them as they come and a CI log keeps
them readable (no carriage returns, no bars). Silent when stderr is neither a terminal nor a CI
log (a caller capturing farm's output), and always under ``--json``, whose stdout and stderr a
caller parses.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

Say = Callable[[str], None]


def reporter(prefix: str, *, json: bool = False) -> Say:
    """A ``say(message)`` that prints ``prefix: message`` on stderr, or does nothing (see above)."""
    if json or not (sys.stderr.isatty() or os.environ.get("CI")):
        return lambda _message: None

    def say(message: str) -> None:
        print(f"{prefix}: {message}", file=sys.stderr, flush=True)

    return say

