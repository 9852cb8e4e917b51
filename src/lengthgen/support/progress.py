"""The tail of a progress log line: elapsed time, rate and ETA.

`step 400/2000 loss 0.0123 acc 1.000 | 12.3 s, 32.5 steps/s, ETA 49 s`: a paper-grid job prints
about a hundred lines, and a user watching one wants to know when it ends.
"""

from __future__ import annotations

import math


def duration(seconds: float) -> str:
    """`49 s`, `12 min 5 s`, `3 h 02 min`: what a person reads at a glance."""
    if not math.isfinite(seconds):
        return "unknown"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def tail(done: int, total: int, elapsed: float, unit: str = "steps", start: int = 0) -> str:
    """`12.3 s, 32.5 steps/s, ETA 49 s` after `done` of `total` units, `elapsed` seconds since
    unit `start` (a resumed run counts only the units it did itself)."""
    rate = (done - start) / elapsed if elapsed > 0 and done > start else math.nan
    eta = (total - done) / rate if rate > 0 else math.nan
    rate_text = f"{rate:.1f}" if math.isfinite(rate) else "?"
    return f"{duration(elapsed)}, {rate_text} {unit}/s, ETA {duration(eta)}"
