"""`unknown name` messages with the nearest known name; light (no pydantic, no numpy), so that a
misspelt `--ops` is answered before anything heavy is imported."""
from __future__ import annotations

import difflib


def unknown_name(kind: str, name: str, known) -> str:
    known = [str(k) for k in known]
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1)
    return (f"unknown {kind} '{name}'" + (f"; did you mean '{by_lower[close[0]]}'?" if close else "")
            + f" (known: {', '.join(known) or 'none'})")
