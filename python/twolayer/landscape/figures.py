"""Figures of landscape results: Hessian spectra and family curves (matplotlib: pip install 'twolayer[plot]')."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._deprecation import warn_renamed
from .._validation import as_float_array, choice, positive
from ..plot import pyplot
from .critical import CriticalPoint, group_eigenvalues
from .realk import RealKFamily
from .subspace import FamilyPoint

__all__ = ["plot_spectrum", "plot_family"]


def _axes(ax: Any) -> Any:
    if ax is not None:
        return ax
    return pyplot().subplots()[1]


def plot_spectrum(point: CriticalPoint | Any, ax: Any = None, tol: float = 1e-7) -> Any:
    """Stem plot of a Hessian spectrum: distinct eigenvalues against their multiplicity.

    The flat directions of the rescaling orbit (``flat_eigenvalues``) are
    drawn apart (orange crosses); the x axis is symmetric-logarithmic.

    Parameters
    ----------
    point : CriticalPoint or array_like
        A classified point, or eigenvalues.
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: a new figure's axes).
    tol : float, default 1e-7
        Relative gap below which eigenvalues are one (see
        :func:`twolayer.landscape.spectrum`).

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> cp = tl.landscape.refine(teacher.with_weights(np.eye(3) + 1e-3), teacher)
    >>> ax = tl.landscape.figures.plot_spectrum(cp)
    >>> ax.get_xlabel()
    'Hessian eigenvalue'
    """
    tol_ = positive(tol, "tol")
    if isinstance(point, CriticalPoint):
        lam, flat, title = point.eigenvalues, point.flat_eigenvalues, f"{point.kind}, risk {point.risk:.6g}"
    else:
        lam, flat, title = as_float_array(point, "point", ndim=1), np.empty(0), ""
    ax = _axes(ax)
    groups = group_eigenvalues(lam, tol_)
    if groups:
        v, m = np.array(groups).T
        ax.vlines(v, 0, m, color="tab:blue", lw=1.5)
        ax.plot(v, m, "o", color="tab:blue", label="transverse" if flat.size else None)
    if flat.size:
        fv, fm = np.array(group_eigenvalues(flat, tol_)).T
        ax.plot(fv, fm, "x", color="tab:orange", ms=8, label="flat (rescaling orbit)")
        ax.legend()
    scale = float(np.max(np.abs(lam), initial=0.0))
    ax.set_xscale("symlog", linthresh=max(1e-3 * scale, 1e-12))
    ax.axvline(0.0, color="k", lw=0.5)
    ax.set(xlabel="Hessian eigenvalue", ylabel="multiplicity", title=title)
    return ax


def plot_family(family: list[FamilyPoint] | RealKFamily, quantity: str = "risk", ax: Any = None) -> Any:
    """A family's excess risk or eigenvalues against k.

    Parameters
    ----------
    family : list of FamilyPoint or RealKFamily
        From :func:`~twolayer.landscape.continue_family` or
        :func:`~twolayer.landscape.continue_real_k`.
    quantity : {"risk", "eigenvalues"}, default "risk"
        ("loss": the old spelling of "risk", deprecated.)
        "eigenvalues": the smallest Hessian eigenvalue per k (a family) or
        every eigenvalue of every isotypic component (RealKFamily, one
        colour per component, the turning point k_turn marked by a dotted
        vertical line).
    ax : matplotlib.axes.Axes, optional
        Where to draw (default: a new figure's axes).

    Returns
    -------
    matplotlib.axes.Axes

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> x6 = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
    >>> fam = tl.landscape.continue_family(lambda k: (k - 1, 1), [6, 7, 8], x6)
    >>> ax = tl.landscape.figures.plot_family(fam, "eigenvalues")
    >>> ax.get_ylabel(), len(ax.lines[0].get_xdata())
    ('smallest Hessian eigenvalue', 3)
    """
    if quantity == "loss":
        warn_renamed("twolayer.landscape.figures.plot_family", "loss", "risk", what="quantity")
        quantity = "risk"
    choice(quantity, "quantity", ("risk", "eigenvalues"))
    if isinstance(family, RealKFamily):
        k = np.asarray(family.k)
        risk = np.asarray(family.risk)
    elif isinstance(family, list) and family and all(isinstance(p, FamilyPoint) for p in family):
        k = np.array([p.k for p in family], dtype=np.float64)
        risk = np.array([p.risk for p in family])
    else:
        raise TypeError(f"family: expected a non-empty list of FamilyPoint or a RealKFamily, got "
                        f"{type(family).__name__}")
    ax = _axes(ax)
    if quantity == "risk":
        ax.plot(k, risk, "o-", color="tab:blue")
        ax.set(xlabel="k", ylabel="excess risk")
        return ax
    if isinstance(family, RealKFamily):
        for c, (name, lam) in enumerate(family.eigenvalues.items()):
            for j in range(lam.shape[1]):
                ax.plot(k, lam[:, j], "-", color=f"C{c % 10}", lw=1, label=name if j == 0 else None)
        if family.k_turn is not None:
            ax.axvline(family.k_turn, color="k", ls=":", label=f"k = {family.k_turn:.6f}")
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.legend()
        ax.set(xlabel="k", ylabel="Hessian eigenvalue")
    else:
        lmin = [float(p.point.eigenvalues[0]) if p.point.eigenvalues.size else np.nan for p in family]
        ax.plot(k, lmin, "o-", color="tab:red")
        ax.set(xlabel="k", ylabel="smallest Hessian eigenvalue")
    ax.axhline(0.0, color="k", lw=0.5)
    return ax
