"""The only source of noise randomness in spark-dp.

Three samplers, chosen by ``privacy.sampler``:

``secure`` (default)
    OpenDP's discrete Gaussian on the grid 2^k (k = −30) drawn from OS
    entropy with exact arithmetic (Canonne, Kamath & Steinke 2020). Values
    are rounded to the grid and the integer noise added exactly, which avoids
    the floating-point attacks on textbook samplers (Mironov 2012; Jin et al.
    2022; Haney et al. 2022). OpenDP's own privacy map is checked on every
    call: the charge recorded in the ledger is never smaller than what OpenDP
    says the draw costs. Large payloads are split over threads (OpenDP's FFI
    releases the GIL), about 13 µs a draw per core.

``numpy``
    ``numpy.random.Generator.normal`` seeded from OS entropy, the noisy value
    rounded to the grid 2^k. Much faster, but floating-point Gaussian samples
    are known to leak through their low-order bits and the rounding is a
    mitigation without a proof: an explicit opt-in, marked in the manifest.

``seeded`` (tests only)
    A caller-supplied ``numpy.random.Generator``. Reproducible and therefore
    *not private*; every release made with it is marked ``"private": false``.

No seed is ever read from a config file.
"""

from __future__ import annotations

import math
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

GRID_EXPONENT = -30
_SECURE_CHUNK = 16_384


class NoiseSampler:
    """Adds noise to a 1-D float64 array. Subclasses are the only samplers."""

    name: str = "abstract"
    private: bool = True

    def gaussian(self, values: np.ndarray, sigma: float, l2_sensitivity: float) -> np.ndarray:
        """Returns ``values`` + N(0, σ²I) (or its secure discrete analogue)."""
        raise NotImplementedError

    def laplace(self, values: np.ndarray, scale: float, l1_sensitivity: float) -> np.ndarray:
        """Returns ``values`` + Lap(b)ⁿ (or its secure discrete analogue)."""
        raise NotImplementedError

    def standard_normal(self, size: int) -> np.ndarray:
        """``size`` i.i.d. N(0, 1) draws, for mechanisms built from Gaussians
        (Wishart via Bartlett or Σ g gᵀ). The secure sampler draws a discrete
        Gaussian on the 2^k grid: a distribution within 2^k of N(0, 1).
        """
        return self.gaussian(np.zeros(size), 1.0, 1.0)

    def key(self) -> int:
        """A 128-bit secret key, e.g. for a counter-based generator on executors."""
        return secrets.randbits(128)

    def noisy_min_index(self, scores: np.ndarray, scale: float, sensitivity: float) -> int:
        """The index of the smallest of ``scores`` − Exp(scale) noise: report-noisy-max with exponential
        noise (permute-and-flip; McKenna & Sheldon 2020), (2Δ/scale)-DP for scores of L∞ sensitivity Δ.
        """
        raise NotImplementedError

    def _noisy_min(self, rng: np.random.Generator, scores: np.ndarray, scale: float) -> int:
        scores = _check_inputs(scores, scale)
        return int(np.argmin(scores - rng.exponential(scale, size=scores.size)))

    def describe(self) -> dict:
        return {"name": self.name, "private": self.private}


def _check_inputs(values: np.ndarray, sigma: float) -> np.ndarray:
    values = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be positive and finite, got {sigma}")
    if not np.isfinite(values).all():
        # Cannot come from data: the aggregate layer clips and applies the
        # non-finite policy. Seeing it means a bug upstream.
        raise ValueError("refusing to noise non-finite values (bug: aggregates must be finite)")
    return values


@dataclass
class SecureSampler(NoiseSampler):
    """OpenDP discrete Gaussian on the 2^k grid from OS entropy (the default)."""

    grid_exponent: int = GRID_EXPONENT
    threads: int = field(default_factory=lambda: max(1, os.cpu_count() or 1))
    name: str = "secure"
    private: bool = True

    def _measurement(self, kind: str, size: int, scale: float):
        import opendp.prelude as dp

        dp.enable_features("contrib")
        domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=size)
        if kind == "gaussian":
            return dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=scale, k=self.grid_exponent)
        return dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=scale, k=self.grid_exponent)

    def gaussian(self, values: np.ndarray, sigma: float, l2_sensitivity: float) -> np.ndarray:
        # OpenDP's map gives ρ (zCDP) for the Gaussian: ρ = Δ²/(2σ²).
        return self._add(values, "gaussian", sigma, l2_sensitivity, l2_sensitivity**2 / (2 * sigma**2))

    def laplace(self, values: np.ndarray, scale: float, l1_sensitivity: float) -> np.ndarray:
        # OpenDP's map gives ε for the Laplace: ε = Δ/b.
        return self._add(values, "laplace", scale, l1_sensitivity, l1_sensitivity / scale)

    def noisy_min_index(self, scores: np.ndarray, scale: float, sensitivity: float) -> int:
        """OpenDP's ``make_noisy_max`` (exponential noise, pure DP), negated to select the minimum."""
        import opendp.prelude as dp

        scores = _check_inputs(scores, scale)
        dp.enable_features("contrib")
        meas = dp.m.make_noisy_max(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float),
                                   dp.max_divergence(), scale=float(scale), negate=True)
        if meas.map(float(sensitivity)) > 2.0 * sensitivity / scale * (1 + 1e-9):  # what the event charges
            raise ArithmeticError("OpenDP's privacy map for the noisy max is above the charged epsilon")
        return int(meas(scores.tolist()))

    def _add(self, values: np.ndarray, kind: str, scale: float, sensitivity: float, loss_nominal: float) -> np.ndarray:
        values = _check_inputs(values, scale)
        n = values.size
        if n == 0:
            return values.copy()
        # Grid rounding of the inputs costs OpenDP a hair of privacy (about
        # 1e-7 relative at k = -30): pay it in noise, never in privacy.
        for _ in range(20):
            if self._measurement(kind, n, scale).map(float(sensitivity)) <= loss_nominal:
                break
            scale *= 1 + 1e-6
        else:  # pragma: no cover - would need a grid far coarser than 2^-30
            raise ArithmeticError("OpenDP's privacy map stays above the charged privacy loss")
        chunks = [values[i : i + _SECURE_CHUNK] for i in range(0, n, _SECURE_CHUNK)]

        def draw(chunk: np.ndarray) -> np.ndarray:
            meas = self._measurement(kind, chunk.size, scale)
            return np.asarray(meas(chunk.tolist()), dtype=np.float64)

        if len(chunks) == 1 or self.threads == 1:
            parts = [draw(c) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=self.threads) as pool:
                parts = list(pool.map(draw, chunks))
        return np.concatenate(parts)


@dataclass
class NumpySampler(NoiseSampler):
    """Floating-point Gaussian from OS entropy, rounded to 2^k. Opt-in; weaker."""

    grid_exponent: int = GRID_EXPONENT
    name: str = "numpy"
    private: bool = True

    def gaussian(self, values: np.ndarray, sigma: float, l2_sensitivity: float) -> np.ndarray:
        values = _check_inputs(values, sigma)
        rng = np.random.default_rng(secrets.randbits(128))
        return self._round(values + rng.normal(0.0, sigma, size=values.size))

    def laplace(self, values: np.ndarray, scale: float, l1_sensitivity: float) -> np.ndarray:
        values = _check_inputs(values, scale)
        rng = np.random.default_rng(secrets.randbits(128))
        return self._round(values + rng.laplace(0.0, scale, size=values.size))

    def noisy_min_index(self, scores: np.ndarray, scale: float, sensitivity: float) -> int:
        return self._noisy_min(np.random.default_rng(secrets.randbits(128)), scores, scale)

    def _round(self, noisy: np.ndarray) -> np.ndarray:
        grid = math.ldexp(1.0, self.grid_exponent)
        return np.round(noisy / grid) * grid


@dataclass
class SeededSampler(NoiseSampler):
    """Reproducible noise from an injected generator. Tests only: not private."""

    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    name: str = "seeded"
    private: bool = False

    def gaussian(self, values: np.ndarray, sigma: float, l2_sensitivity: float) -> np.ndarray:
        values = _check_inputs(values, sigma)
        return values + self.rng.normal(0.0, sigma, size=values.size)

    def laplace(self, values: np.ndarray, scale: float, l1_sensitivity: float) -> np.ndarray:
        values = _check_inputs(values, scale)
        return values + self.rng.laplace(0.0, scale, size=values.size)

    def noisy_min_index(self, scores: np.ndarray, scale: float, sensitivity: float) -> int:
        return self._noisy_min(self.rng, scores, scale)

    def key(self) -> int:
        return int(self.rng.integers(0, 2**63)) << 64 | int(self.rng.integers(0, 2**63))


SAMPLERS = ("secure", "numpy")


def make_sampler(name: str | NoiseSampler) -> NoiseSampler:
    """A sampler by config name (``secure`` or ``numpy``), or the instance given."""
    if isinstance(name, NoiseSampler):
        return name
    if name == "secure":
        return SecureSampler()
    if name == "numpy":
        return NumpySampler()
    raise ValueError(f"unknown sampler {name!r}; expected one of {list(SAMPLERS)}")
