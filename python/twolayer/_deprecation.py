"""Old spellings of renamed arguments, accepted for one release with a ``DeprecationWarning``.

The package uses one name per idea (see ``docs/conventions.rst``, section "Vocabulary"). A function whose
argument was renamed is decorated with :func:`renamed`; a caller that still uses the old spelling gets the new
argument and a warning that names both spellings and the release that removes the old one.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

REMOVED_IN = "0.3"


def warn_renamed(owner: str, old: str, new: str, what: str = "argument", stacklevel: int = 3) -> None:
    """Warn that ``what`` ``old`` of ``owner`` is now spelled ``new``."""
    warnings.warn(f"{what} {old!r} of {owner} is deprecated; use {new!r} (the old spelling is removed in "
                  f"twolayer {REMOVED_IN})", DeprecationWarning, stacklevel=stacklevel)


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """Accept old keyword spellings ``old=...`` for ``new``, with a ``DeprecationWarning``.

    Passing both spellings is a ``TypeError`` naming both.

    Examples
    --------
    >>> from twolayer._deprecation import renamed
    >>> @renamed(n_points="n_records")
    ... def f(*, n_records: int = 101) -> int:
    ...     return n_records
    """
    def decorate(fn: F) -> F:
        owner = f"{fn.__module__}.{fn.__qualname__}"

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{owner}() got both {old!r} and its new spelling {new!r}; pass only {new!r}")
                    warn_renamed(owner, old, new)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed__ = dict(old_to_new)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
