"""The private clipping report: how many rows the bounds and the norm bound changed (numpy only).

Clipping bias is what noise intervals never show: a release whose bounds or
norm bound bite is biased towards zero however small its noise. With
``clipping_report=True`` a second-moment, regression or PCA release also
releases, at a stated share of its ε (``clipping_report_share``, default
0.05), the pair of counts

* c — the rows that were clipped: a value clamped to its public ``bounds``
  (a finite value outside [lo, hi]), or the row's L2 norm above the norm
  bound B (scaled down to B), or both (counted once);
* n — the rows that entered the release (after the ``nonfinite`` policy and
  contribution bounding),

both exact counts from the SAME Spark job as the Gram matrix (two more
accumulated scalars of each partition's partial; no extra pass), plus Laplace
noise of scale b = Δ₁/ε_c drawn through the chokepoint after the charge. The
payload arrays are ``clipping_counts`` = [c̃, ñ] and ``clipped_fraction`` =
[min(max(c̃, 0)/max(ñ, 1), 1)] (post-processing), each with its interval.

Sensitivity Δ₁ of (c, n) (m = ``max_rows_per_unit``). Contribution bounding
keeps at most m rows of each unit (rows of a null ``privacy_unit`` value form
one unit; which rows is a function of a secret and the unit's own rows), and
then the kernel applies the ``nonfinite`` policy: ``drop`` removes every kept
row with a NaN, ±inf or null value, so a unit enters the counts with anywhere
from 0 to m rows (0: all its kept rows are dropped); ``zero`` keeps them all.
Hence:

* add/remove one unit of k ≤ m rows: n moves by k and c by j ≤ k, in the
  same direction: Δ₁ = 2m (a unit of m clipped rows);
* replace one unit's k₁ kept rows by k₂ others (0 ≤ k₁, k₂ ≤ m: the
  replacing unit's rows may all be dropped by the policy, e.g. all-NaN rows
  under ``drop``): n moves by k₂ − k₁ and c by j₂ − j₁ with 0 ≤ jᵢ ≤ kᵢ, so
  |Δn| + |Δc| ≤ |k₂ − k₁| + max(k₁, k₂) ≤ 2m, attained by m clipped rows
  replaced by m rows the policy drops: Δ₁ = 2m, as under add/remove (one
  row per unit: a clipped row replaced by an all-NaN row moves (c, n) by
  (−1, −1)). The bound is the same for both policies and both input
  paths (the Spark reader and the direct Parquet path count the same rows);
  counting n before the policy would save one (2m − 1) but would no longer
  count the rows that entered the matrix.

The count c alone would have sensitivity m under either relation (a unit's
rows change it by at most 1 each); n is released with it so the fraction
needs no other statistic.

The event is a :class:`~spark_dp.privacy.events.LaplaceEvent` with noise
multiplier b/Δ₁ = 1/ε_c (pure ε_c-DP, Dwork et al. 2006), composed with the
release's other events by the ledger's PLD accountant; the mechanism gets
ε − ε_c (and − the share of ``norm_bound="auto"``).

Intervals (post-processing, level ℓ): each count ± b·ln(1/(1 − ℓ)) (the
exact two-sided Laplace interval, ``kind="interval"``, covering the noise);
the fraction from the counts' intervals at level (1 + ℓ)/2 each
(Bonferroni), [c_lo/n_hi, c_hi/n_lo] within [0, 1]: it holds with
probability ≥ ℓ (``kind="bound"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spark_dp.errors import ConfigError
from spark_dp.privacy.events import LaplaceEvent
from spark_dp.release.uncertainty import Uncertainty, check_level

DEFAULT_SHARE = 0.05
ARRAYS = ("clipped_fraction", "clipping_counts")


def clipping_sensitivity(*, max_rows_per_unit: int = 1, neighbors: str = "add_remove") -> float:
    """L1 sensitivity of (clipped rows, rows) for m rows per unit (module docstring)."""
    m = int(max_rows_per_unit)
    if neighbors in ("add_remove", "replace"):  # replace: a unit may keep 0 rows after the policy
        return 2.0 * m
    raise ValueError(f"unknown neighbour relation {neighbors!r}")


@dataclass(frozen=True)
class ClippingPlan:
    """The public plan of one clipping report: its ε, sensitivity and event."""

    epsilon: float
    sensitivity: float
    event: LaplaceEvent

    @property
    def scale(self) -> float:
        """Laplace scale b = Δ₁/ε."""
        return self.sensitivity / self.epsilon

    def manifest(self) -> dict:
        return {"method": "Laplace mechanism on (clipped rows, rows), L1 sensitivity stated; the fraction is "
                          "post-processing (spark_dp.second_moment.clipping)",
                "clipped": "a finite value outside its bounds (clamped), or the row's L2 norm above the norm bound "
                           "(scaled down), counted once per row; rows after the nonfinite policy and contribution "
                           "bounding",
                "epsilon": self.epsilon, "l1_sensitivity": self.sensitivity, "laplace_scale": self.scale}


def check_shares(owner: str, norm_bound_share: float, clipping_share: float, *, what: str = "clipping_report_share",
                 other: str = "norm_bound_share") -> None:
    """ConfigError unless two data-dependent steps' shares of ε leave the mechanism some (named ``what``)."""
    if norm_bound_share + clipping_share >= 1.0:
        raise ConfigError(f"The {what!r} parameter of {owner} plus {other} must be below 1 (the mechanism needs a "
                          f"share of epsilon). Got {clipping_share!r} + {norm_bound_share!r}.")


def plan_clipping_report(epsilon: float, *, max_rows_per_unit: int = 1,
                         neighbors: str = "add_remove") -> ClippingPlan:
    """The plan of an ε-DP clipping report (public parameters only)."""
    sens = clipping_sensitivity(max_rows_per_unit=max_rows_per_unit, neighbors=neighbors)
    return ClippingPlan(epsilon, sens, LaplaceEvent(noise_multiplier=1.0 / epsilon))


def laplace_half_width(scale: float, level: float) -> float:
    """t with P(|Lap(b)| ≤ t) = level: b·ln(1/(1 − level))."""
    return scale * math.log(1.0 / (1.0 - check_level(level)))


def release_clipping(chokepoint, plan: ClippingPlan, counts: np.ndarray,
                     level: float) -> tuple[dict[str, np.ndarray], dict[str, Uncertainty]]:
    """Noises the exact ``counts`` = [clipped, rows] through ``chokepoint`` (its charged ``plan.event``).

    Returns the payload arrays and their uncertainties (module docstring).
    """
    noisy = chokepoint.laplace(np.asarray(counts, dtype=np.float64), scale=plan.scale,
                               l1_sensitivity=plan.sensitivity)
    c, n = float(noisy[0]), float(noisy[1])
    fraction = np.array([min(max(c, 0.0) / max(n, 1.0), 1.0)])
    t = laplace_half_width(plan.scale, level)
    sd = math.sqrt(2.0) * plan.scale
    counts_u = Uncertainty(noisy - t, noisy + t, np.full(2, sd), method=(
        "value ± b·ln(1/(1 − level)), b the Laplace scale (exact for additive Laplace noise)"))
    tb = laplace_half_width(plan.scale, (1.0 + level) / 2.0)
    low = max(c - tb, 0.0) / max(n + tb, 1.0)
    high = (c + tb) / (n - tb) if n - tb > 0 else 1.0
    frac_u = Uncertainty(np.array([min(low, 1.0)]), np.array([min(max(high, 0.0), 1.0)]), None, kind="bound",
                         method=("[c_lo/n_hi, c_hi/n_lo] within [0, 1] from both counts' Laplace intervals at "
                                 "level (1 + level)/2 (Bonferroni): holds with probability >= level"))
    return ({"clipped_fraction": fraction, "clipping_counts": noisy},
            {"clipped_fraction": frac_u, "clipping_counts": counts_u})
