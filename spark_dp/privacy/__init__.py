"""Privacy layer: sensitivities, calibration, samplers, accountant, ledger.

Knows nothing of Spark. :class:`Chokepoint` is the only way noise reaches
data-derived values.
"""

from spark_dp.privacy.accountant import Budget, compose_epsilon, total_mu
from spark_dp.privacy.calibration import gaussian_noise_multiplier
from spark_dp.privacy.chokepoint import Chokepoint, UnchargedNoiseError
from spark_dp.privacy.events import Chi2ProfileEvent, EpsilonDeltaEvent, GaussianEvent, LaplaceEvent
from spark_dp.privacy.ledger import Ledger, PostgresLedger, SQLiteLedger, open_ledger
from spark_dp.privacy.noise import NoiseSampler, NumpySampler, SecureSampler, SeededSampler, make_sampler
from spark_dp.privacy.sensitivity import NEIGHBORS, second_moment_l2_sensitivity

__all__ = [
    "NEIGHBORS",
    "Budget",
    "Chi2ProfileEvent",
    "Chokepoint",
    "EpsilonDeltaEvent",
    "GaussianEvent",
    "LaplaceEvent",
    "NoiseSampler",
    "NumpySampler",
    "Ledger",
    "PostgresLedger",
    "SQLiteLedger",
    "SecureSampler",
    "SeededSampler",
    "UnchargedNoiseError",
    "compose_epsilon",
    "gaussian_noise_multiplier",
    "make_sampler",
    "open_ledger",
    "second_moment_l2_sensitivity",
    "total_mu",
]
