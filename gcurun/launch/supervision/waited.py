"""Which ranks a failed rank gave up waiting for, read from its last words.

A rank stopped by SIGSTOP (or hung, or cut off) never fails by itself: the ranks that wait
for it do, when their collective times out or the stall inspector ends the job. Their
messages name the rank they waited for (``... waiting for rank 1 ...``, ``... waiting for
rank 1 and rank 3 ...``, ``... waiting for ranks 1, 3 (not submitted there) ...``, ``the
stall inspector shut the job down: rank 1 did not answer ...``); the launcher reads them so
the root cause names the rank that did not arrive, not the one that waited. A rank told of
another's timeout while it waited itself says for whom (``... (this rank was itself waiting
for rank 2, ...)``): that rank is further down the chain, and named instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_RANKS = r"(ranks? \d+(?:(?:, | and | and rank )\d+)*)"
_PATTERNS = (
    # an abort that reached a rank while it waited itself names the ranks further on
    re.compile(r"this rank was itself waiting for " + _RANKS),
    re.compile(r"(?:CollectiveTimeout|PeerFailureError|stall inspector)\b.*?"
               r"no progress for [\d.]+ s waiting for " + _RANKS),
    re.compile(r"no progress for [\d.]+ s waiting for " + _RANKS),
    re.compile(r"the stall inspector shut the job down: " + _RANKS + r" did not answer"),
)


def ranks_waited_for(lines: Iterable[str]) -> tuple[int, ...]:
    """The ranks named as waited for in the last such message of ``lines``, in order;
    () when no line says so. A list cut short (``and 3 more``) gives the ranks named."""
    found: tuple[int, ...] = ()
    for line in lines:
        for pattern in _PATTERNS:
            match = pattern.search(line)
            if match:
                found = tuple(dict.fromkeys(int(n) for n in re.findall(r"\d+", match[1])))
                break
    return found
