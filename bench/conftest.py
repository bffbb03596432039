"""Benchmarks: each hot path next to a straightforward NumPy implementation of the same computation.

Run with ``python -m pytest bench --benchmark-only`` (the ``bench`` extra). Ratios are printed by
``--benchmark-compare``-free grouping: each group holds the twolayer and NumPy versions of one computation.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
