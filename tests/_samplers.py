"""Test samplers and the fake chokepoint shared by the privacy audits.

* :class:`UnderNoised` — the deliberately under-noised sampler every audit must
  catch: Gaussians of σ/divisor and Laplace of b/divisor (σ/2, b/2 by default)
  from a real sampler (Numpy by default; Secure or Seeded where a test wants it).
* :class:`Recorder` — wraps a sampler and records each additive draw: its kind,
  the requested scale and Δ, the exact input values and the noise added; and
  counts every call (``standard_normal`` and ``key`` too).
* :class:`FakeChokepoint` — hands out one sampler for any event without
  bookkeeping, for audits that draw many releases cheaply (the real
  Chokepoint's bookkeeping is tested in test_second_moment_mechanisms.py's
  ``test_randomness_needs_a_charge`` and in test_privacy_chokepoint.py).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from spark_dp.privacy import NoiseSampler, NumpySampler, SeededSampler


class UnderNoised(NoiseSampler):
    """Under-noised on purpose: ``inner``'s Gaussians of σ/divisor and Laplace of b/divisor.

    ``standard_normal`` (NoiseSampler's, through :meth:`gaussian`) is scaled too,
    as it is in a subclass of ``inner`` that overrides ``gaussian``; ``key`` is ``inner``'s.
    """

    def __init__(self, inner: NoiseSampler | None = None, divisor: float = 2):
        self.inner = inner if inner is not None else NumpySampler()
        self.divisor = divisor
        self.name, self.private = self.inner.name, self.inner.private

    def gaussian(self, values, sigma, l2_sensitivity):
        return self.inner.gaussian(values, sigma / self.divisor, l2_sensitivity)

    def laplace(self, values, scale, l1_sensitivity):
        return self.inner.laplace(values, scale / self.divisor, l1_sensitivity)

    def key(self):
        return self.inner.key()


class Draw(NamedTuple):
    """One additive draw as the sampler saw it."""

    kind: str  # "gaussian" or "laplace"
    scale: float  # the σ or b asked for
    sensitivity: float  # the Δ₂ or Δ₁ asked for
    noise: np.ndarray  # output − input
    values: np.ndarray  # the exact input (a copy)


class Recorder(NoiseSampler):
    """Wraps a sampler (Numpy by default) and records every additive draw, in order.

    Only ``gaussian`` and ``laplace`` are recorded as draws; ``standard_normal``
    and ``key`` go to ``inner`` and are only counted in :attr:`calls` (method
    name → number of calls, all four methods).
    """

    def __init__(self, inner: NoiseSampler | None = None):
        self.inner = inner if inner is not None else NumpySampler()
        self.name, self.private = self.inner.name, self.inner.private
        self.draws: list[Draw] = []
        self.calls: Counter[str] = Counter()

    @property
    def noise(self) -> list[np.ndarray]:
        return [d.noise for d in self.draws]

    @property
    def values(self) -> list[np.ndarray]:
        return [d.values for d in self.draws]

    def _record(self, kind, values, out, scale, sensitivity):
        self.draws.append(Draw(kind, float(scale), float(sensitivity), out - np.asarray(values, dtype=float),
                               np.array(values, dtype=float)))
        return out

    def gaussian(self, values, sigma, l2_sensitivity):
        self.calls["gaussian"] += 1
        return self._record("gaussian", values, self.inner.gaussian(values, sigma, l2_sensitivity), sigma,
                            l2_sensitivity)

    def laplace(self, values, scale, l1_sensitivity):
        self.calls["laplace"] += 1
        return self._record("laplace", values, self.inner.laplace(values, scale, l1_sensitivity), scale,
                            l1_sensitivity)

    def standard_normal(self, size):
        self.calls["standard_normal"] += 1
        return self.inner.standard_normal(size)

    def key(self):
        self.calls["key"] += 1
        return self.inner.key()


class FakeChokepoint:
    """Hands out its sampler for any event, without bookkeeping: lets audits draw many releases cheaply.

    ``gaussian`` and ``gaussian_symmetric`` shape values as the real Chokepoint does.
    """

    def __init__(self, sampler: NoiseSampler):
        self.sampler = sampler

    @classmethod
    def seeded(cls, seed) -> FakeChokepoint:
        """Over a SeededSampler on ``np.random.default_rng(seed)`` (``None``: fresh entropy)."""
        return cls(SeededSampler(np.random.default_rng(seed)))

    def randomness(self, event):
        return self.sampler

    def gaussian(self, values, *, sigma, l2_sensitivity):
        return self.sampler.gaussian(np.asarray(values, dtype=float).reshape(-1), sigma, l2_sensitivity).reshape(
            np.shape(values))

    def gaussian_symmetric(self, matrix, *, sigma, l2_sensitivity):
        iu = np.triu_indices(matrix.shape[0])
        out = np.zeros_like(matrix)
        out[iu] = self.gaussian(matrix[iu], sigma=sigma, l2_sensitivity=l2_sensitivity)
        return out + np.triu(out, 1).T
