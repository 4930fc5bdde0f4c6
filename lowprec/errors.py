"""An exception in one line, for a log line, a table cell or a warning.

Benchmarks and tuners record a failing configuration and go on; their tables keep one row per
failure, so a multi-line message is cut to the line that says what went wrong.
"""

from __future__ import annotations

import re

# Triton's compilation errors open with the kernel-source location and a listing of the source, and
# end with the error itself
_LOCATION = re.compile(r"at \d+:\d+:$")


def error_text(exc: BaseException, limit: int = 200) -> str:
    """``Type: the message's first line`` (at most `limit` characters of it; its last line when the
    first is only a source location); the type alone when the message is empty, as ``EOFError()``'s."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    line = lines[-1] if _LOCATION.fullmatch(lines[0]) else lines[0]
    return f"{type(exc).__name__}: {line[:limit]}"
