"""The noise of a merged Laplace sketch: a sum of independent Laplace variables, in closed form.

Merging n Count-Min (Laplace) sketches adds their tables, so each merged
counter's noise is S = L₁ + … + L_n with L_i ~ Laplace(b_i) independent —
not Laplace, and not Gaussian. Its law, in units of b = max b_i:

* Equal scales (b_i = b: parts released at equal ε, the usual daily →
  weekly merge): exact. Laplace(1) = E − E′ (E, E′ i.i.d. exponential), so
  S = G − G′ with G, G′ i.i.d. Gamma(n, 1); integrating the density of the
  difference of two Gammas gives, for x ≥ 0,

      P(S > x) = Σ_{j=0}^{n−1} C(n−1+j, j)·2^{−(n+j)}·Q(n − j, x)

  with Q the regularised upper incomplete gamma function (scipy's
  ``gammaincc``); n = 1 gives Laplace's ½e^{−x}, n = 2 ½e^{−x}(1 + x/2). S
  is symmetric, so P(S < −x) = P(S > x). Quantiles by numeric inversion of
  that CDF (bisection to 1e-12 relative).
* Unequal scales: bounds. Laplace(b_i) is more peaked (Birnbaum 1948) than
  Laplace(b) for b_i ≤ b and less peaked than Laplace(b_min); sums of
  independent symmetric unimodal variables keep that order (Birnbaum's
  theorem), so P(|S| > x) lies between the tails of the equal-scale sums at
  b_min and at b = max b_i. Every tail and quantile here is taken on the
  side that makes an interval wider (:meth:`LaplaceSum.quantile_bound`,
  :meth:`LaplaceSum.sf`), so the intervals are bounds (kind ``bound``).

Draws (:meth:`LaplaceSum.rvs`, for simulated estimator laws) use the exact
scales. Public arithmetic on public parameters: no data, no privacy cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _sf_equal(n: int, x) -> np.ndarray:
    """P(L₁ + … + L_n > x) for i.i.d. Laplace(1), x any real (closed form, module doc)."""
    from scipy import special

    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    j = np.arange(n)
    log_w = special.gammaln(n + j) - special.gammaln(j + 1) - special.gammaln(n) - (n + j) * math.log(2.0)
    tail = np.sum(np.exp(log_w)[:, None] * special.gammaincc((n - j)[:, None], ax.reshape(1, -1)), axis=0)
    tail = tail.reshape(ax.shape)
    return np.where(x >= 0, tail, 1.0 - tail)


def _ppf_equal(n: int, q) -> np.ndarray:
    """The q-quantile of the sum of n i.i.d. Laplace(1), by bisection of the closed-form CDF."""
    q = np.asarray(q, dtype=np.float64)
    p = np.minimum(q, 1.0 - q)  # lower-tail probability; the quantile of p ≤ ½ is −x with P(S > x) = p
    hi = np.full(p.shape, 1.0)
    for _ in range(2000):  # the tail is at most e^{-x} x^{n-1}-like: doubling brackets it quickly
        grow = (_sf_equal(n, hi) > p) & (p > 0)
        if not grow.any():
            break
        hi = np.where(grow, hi * 2.0, hi)
    lo = np.zeros(p.shape)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        above = _sf_equal(n, mid) > p
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        if np.all(hi - lo <= 1e-12 * np.maximum(hi, 1.0)):
            break
    x = np.where(p > 0, hi, np.inf)  # hi: P(S > hi) <= p, the outer end
    return np.where(q < 0.5, -x, np.where(q == 0.5, 0.0, x))


@dataclass(frozen=True)
class LaplaceSum:
    """The law of L₁ + … + L_n, L_i ~ Laplace(ratios_i) independent, in units of the largest scale (module doc).

    ``ratios`` are b_i / max b_i (the largest is 1), sorted; the caller
    multiplies by that largest scale, as for a single Laplace(b).
    """

    ratios: tuple[float, ...]

    @classmethod
    def of(cls, scales) -> tuple[LaplaceSum, float]:
        """(law, scale b = max b_i) of the sum of Laplace(b_i)."""
        s = [float(x) for x in scales]
        if not s or min(s) <= 0 or not all(math.isfinite(x) for x in s):
            raise ValueError(f"bug: Laplace scales must be finite and > 0, got {scales!r}")
        b = max(s)
        return cls(tuple(sorted((round(x / b, 12) for x in s), reverse=True))), b

    @property
    def n(self) -> int:
        return len(self.ratios)

    @property
    def exact(self) -> bool:
        """Equal scales: the closed form is the law itself (otherwise tails and quantiles are bounds)."""
        return all(r == 1.0 for r in self.ratios)

    @property
    def variance(self) -> float:
        """Var S = 2 Σ r_i² (unit scale)."""
        return 2.0 * math.fsum(r * r for r in self.ratios)

    @property
    def variance_of_square(self) -> float:
        """Var S² = κ₄ + 2κ₂² = 12 Σ r_i⁴ + 8 (Σ r_i²)² (Laplace(r): κ₂ = 2r², κ₄ = 12r⁴; cumulants add)."""
        s2 = math.fsum(r * r for r in self.ratios)
        return 12.0 * math.fsum(r ** 4 for r in self.ratios) + 8.0 * s2 * s2

    @property
    def _inner(self) -> float:
        return min(self.ratios)

    def sf(self, x) -> np.ndarray:
        """≥ P(S > x) (exact for equal scales): the b_max law for x ≥ 0, the b_min law below 0."""
        x = np.asarray(x, dtype=np.float64)
        if self.exact:
            return _sf_equal(self.n, x)
        return np.where(x >= 0, _sf_equal(self.n, x), _sf_equal(self.n, x / self._inner))

    def cdf(self, x) -> np.ndarray:
        """≤ P(S ≤ x) (exact for equal scales)."""
        return 1.0 - self.sf(x)

    def ppf(self, q) -> np.ndarray:
        """The q-quantile, outward (away from 0) for unequal scales: the b_max law (exact for equal scales)."""
        return _ppf_equal(self.n, q)

    def quantile_bound(self, q, *, upper: bool) -> np.ndarray:
        """A value ≥ (``upper``) or ≤ the true q-quantile of S (the quantile itself for equal scales).

        By peakedness (module doc) the true quantile lies between the b_min
        and the b_max laws' (both of the sign of q − ½): for an upper bound
        take the b_max law's above the median and the b_min law's below it;
        for a lower bound the reverse.
        """
        q = np.asarray(q, dtype=np.float64)
        outer = _ppf_equal(self.n, q)
        if self.exact:
            return outer
        inner = self._inner * outer
        return np.where((q >= 0.5) == upper, outer, inner)

    def rvs(self, rng: np.random.Generator, size) -> np.ndarray:
        """Draws of S with the exact scales (for simulated estimator laws; not privacy noise)."""
        out = np.zeros(size)
        for r in self.ratios:
            out += rng.laplace(scale=r, size=size)
        return out

    def describe(self) -> str:
        if self.exact:
            return f"the exact law of a sum of {self.n} independent Laplace(b) (closed form, gammaincc)"
        return (f"bounds on a sum of {self.n} independent Laplace(b_i) with unequal b_i (between the sums at the "
                "smallest and the largest b_i, Birnbaum's peakedness ordering)")
