"""The compiled core: replaces itself in ``sys.modules`` by the extension module ``twolayer._core_<level>`` of the
instruction level this CPU runs best, or the one TWOLAYER_SIMD names (see :mod:`twolayer._dispatch`). Its API is
typed in _core.pyi."""

import sys

from ._dispatch import load

sys.modules[__name__] = load()
