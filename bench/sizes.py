"""Problem sizes of the benchmarks: the default suite (about 3 minutes on 2 cores) or the full headline sizes.

``TWOLAYER_BENCH_FULL=1 python -m pytest bench --benchmark-only`` runs the benchmarks whose headline
configuration is inherently long (the issue's reference sizes: k = 50 Hessians, SGD escapes at d = 4000, ...)
at those sizes; by default they run smaller configurations whose ratios measure the same thing.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

FULL = os.environ.get("TWOLAYER_BENCH_FULL", "").strip() not in ("", "0")


def size(default: T, full: T) -> T:
    """``full`` when ``TWOLAYER_BENCH_FULL`` is set (and not 0), else ``default``."""
    return full if FULL else default
