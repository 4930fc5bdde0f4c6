"""Selecting layers by name: the fnmatch patterns of a method's ``include`` / ``exclude``
(``model.layers.*.mlp.*``). Free of torch, so that the report jobs that group telemetry by layer
start without it."""

from __future__ import annotations

import fnmatch
from typing import Iterable


def matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)
