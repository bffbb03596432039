"""Result objects: :class:`Trajectory`, the common output of every dynamics (ODE, SGD, population descent)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray


@dataclass(eq=False)
class Trajectory:
    """Order parameters over time, time first.

    ``t`` (T,), ``Q`` (T, K, K), ``M`` (T, K, M), ``a`` (T, K) and ``risk`` (T,) — the excess population risk
    (the noise floor Delta/2 is not included). ``status`` is ``"completed"``, ``"converged"`` (early stop),
    ``"diverged"``, ``"max_steps"`` (the step budget ran out) or ``"interrupted"`` (Ctrl-C: the partial result
    of :class:`twolayer.Interrupted`); ``message`` says why and when. ``time_unit`` names the clock (e.g.
    "t = steps / d" or "iterations"). ``student`` holds the final network of weight-space runs (None for the ODE).
    """

    t: NDArray[np.float64]
    Q: NDArray[np.float64]
    M: NDArray[np.float64]
    a: NDArray[np.float64]
    risk: NDArray[np.float64]
    status: str = "completed"
    message: str = ""
    time_unit: str = "t"
    student: Any = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def final_risk(self) -> float:
        """The last recorded excess risk (NaN if nothing was recorded)."""
        return float(self.risk[-1]) if len(self.risk) else float("nan")

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` with dimensions time, student, student2, teacher (needs the xarray extra)."""
        try:
            import xarray as xr
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("to_xarray needs xarray: pip install 'twolayer[xarray]'") from exc
        return xr.Dataset(
            {
                "Q": (("time", "student", "student2"), self.Q),
                "M": (("time", "student", "teacher"), self.M),
                "a": (("time", "student"), self.a),
                "risk": (("time",), self.risk),
            },
            coords={"time": self.t},
            attrs={"status": self.status, "message": self.message, "time_unit": self.time_unit,
                   **{k: v for k, v in self.meta.items() if isinstance(v, (int, float, str))}},
        )

    def __repr__(self) -> str:
        K = self.Q.shape[1] if self.Q.ndim == 3 else 0
        M = self.M.shape[2] if self.M.ndim == 3 else 0
        return (f"Trajectory(T={len(self)}, K={K}, M={M}, status={self.status!r}, "
                f"final_risk={self.final_risk:.6g})")


# long_name and units of the variables of result datasets (``to_xarray``); times take the clock's unit.
_VARIABLE_ATTRS: dict[str, tuple[str, str]] = {
    "t": ("time", ""),
    "Q": ("student-student overlaps Q = W W^T / s", "1"),
    "M": ("student-teacher overlaps M = W W*^T / s", "1"),
    "P": ("teacher-teacher overlaps P = W* W*^T / s", "1"),
    "a": ("effective second-layer weights of the student (readout factor applied)", "1"),
    "v": ("effective second-layer weights of the teacher (readout factor applied)", "1"),
    "risk": ("excess population risk (noise floor Delta/2 not included)", "1"),
    "status": ("how the run ended: completed, converged, diverged or interrupted", ""),
    "stop_time": ("time of the early stop, divergence or interruption (NaN: ran to the end)", ""),
    "lr": ("first-layer learning rate", "1"),
    "lr_readout": ("second-layer learning rate", "1"),
    "noise": ("label-noise variance Delta", "1"),
    "risk_tol": ("early stop below this excess risk (NaN: off)", "1"),
    "risk_rtol": ("early stop below this fraction of the initial excess risk (NaN: off)", "1"),
    "run": ("run, in call order", "1"),
    "run_id": ("run index j of the random streams keyed by (seed, j)", "1"),
}
_TIMES = ("t", "stop_time")


def variable_attrs(name: str, time_unit: str) -> dict[str, str]:
    """``{"long_name": ..., "units": ...}`` for a result variable or coordinate ``name``; times (``t``,
    ``stop_time``) get ``time_unit``, dimensionless numbers "1", labels (status) ""."""
    long_name, units = _VARIABLE_ATTRS[name]
    return {"long_name": long_name, "units": time_unit if name in _TIMES else units}
