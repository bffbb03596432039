"""Old spellings of renamed arguments, attributes and keys, accepted for one release with a ``DeprecationWarning``.

The package uses one name per idea (see ``docs/conventions.rst``, section "Vocabulary"). A function whose
argument was renamed is decorated with :func:`renamed`; a caller that still uses the old spelling gets the new
argument and a warning that names both spellings and the release that removes the old one. A renamed attribute
keeps its old spelling as :func:`renamed_attribute`, a renamed key of a configuration mapping (a scan's keys) is
translated by :func:`renamed_keys`.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

REMOVED_IN = "0.3"


def public_name(module: str, qualname: str) -> str:
    """``module.qualname`` without the private modules a public name is re-exported from
    (``twolayer.ode._integrate.integrate`` -> ``twolayer.ode.integrate``)."""
    return ".".join([p for p in module.split(".") if not p.startswith("_")] + [qualname])


def warn_renamed(owner: str, old: str, new: str, what: str = "argument", stacklevel: int = 3) -> None:
    """Warn that ``what`` ``old`` of ``owner`` is now spelled ``new``."""
    warnings.warn(f"{what} {old!r} of {owner} is deprecated; use {new!r} (the old spelling is removed in "
                  f"twolayer {REMOVED_IN})", DeprecationWarning, stacklevel=stacklevel)


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """Accept old keyword spellings ``old=...`` for ``new``, with a ``DeprecationWarning``.

    Passing both spellings is a ``TypeError`` naming both.

    Examples
    --------
    >>> import warnings
    >>> from twolayer._deprecation import renamed
    >>> @renamed(n_points="n_records")
    ... def f(*, n_records: int = 101) -> int:
    ...     return n_records
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     f(n_points=11)
    11
    >>> caught[0].category.__name__
    'DeprecationWarning'
    """
    def decorate(fn: F) -> F:
        owner = public_name(fn.__module__, fn.__qualname__)

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


def renamed_attribute(new: str, doc: str | None = None, writable: bool = False) -> property:
    """A property that returns attribute ``new`` and warns that its own (old) name is deprecated; with
    ``writable`` (a field of a mutable configuration) assigning to it sets ``new``, with the same warning.

    Examples
    --------
    >>> from twolayer._deprecation import renamed_attribute
    >>> class R:
    ...     final_risk = 0.5
    ...     risk_final = renamed_attribute("final_risk")
    """
    class Alias(property):
        def __set_name__(self, owner: type, name: str) -> None:
            self.owner, self.old = public_name(owner.__module__, owner.__qualname__), name

    def get(self: Any) -> Any:
        warn_renamed(alias.owner, alias.old, new, what="attribute")
        return getattr(self, new)

    def set_(self: Any, value: Any) -> None:
        warn_renamed(alias.owner, alias.old, new, what="attribute")
        setattr(self, new, value)

    alias = Alias(get, set_ if writable else None)
    alias.__doc__ = doc or f"Deprecated spelling of ``{new}`` (removed in twolayer {REMOVED_IN})."
    return alias


def renamed_keys(config: Mapping[str, Any], old_to_new: Mapping[str, str], owner: str, what: str = "key",
                 stacklevel: int = 3) -> dict[str, Any]:
    """``config`` with every old key of ``old_to_new`` replaced by its new spelling, each with a
    ``DeprecationWarning``; both spellings at once are a ``ValueError`` naming both."""
    out: dict[str, Any] = {}
    for key, value in config.items():  # in the given order: the order of a scan's axes is its dimensions'
        new = old_to_new.get(key)
        if new is not None:
            if new in config:
                raise ValueError(f"{key}: {owner} got both {key!r} and its new spelling {new!r}; give only {new!r}")
            warn_renamed(owner, key, new, what=what, stacklevel=stacklevel + 1)
            key = new
        out[key] = value
    return out
