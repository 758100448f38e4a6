"""Tensor decomposition by the (online, private) tensor power method.

Wang & Anandkumar, "Online and Differentially-Private Tensor Decomposition",
NIPS 2016: Alg. 1 (:func:`robust_tensor_power_method`), Alg. 2
(:func:`online_tensor_power_method`), Alg. 3
(:func:`private_tensor_power_method`), the private method over rows
(:func:`private_online_power_method`), the input-perturbation baseline
(:func:`input_perturbation`), and whitening for non-orthogonal components
(:mod:`spark_dp.tensor.whiten`). The session-level entry point is
:func:`spark_dp.tensor.api.tensor_decomposition`.
"""

from spark_dp.tensor.input_perturbation import input_perturbation, input_perturbation_plan
from spark_dp.tensor.online import online_tensor_power_method
from spark_dp.tensor.power_method import TensorDecomposition, robust_tensor_power_method
from spark_dp.tensor.private import (
    CALIBRATIONS,
    MODES,
    PrivatePlan,
    private_online_power_method,
    private_tensor_power_method,
    rows_plan,
    tensor_entry_plan,
)
from spark_dp.tensor.whiten import (
    WhitenedDecomposition,
    private_whitened_power_method,
    whitened_online_power_method,
    whitened_rows_plan,
)

__all__ = [
    "CALIBRATIONS",
    "MODES",
    "PrivatePlan",
    "TensorDecomposition",
    "WhitenedDecomposition",
    "input_perturbation",
    "input_perturbation_plan",
    "online_tensor_power_method",
    "private_online_power_method",
    "private_tensor_power_method",
    "robust_tensor_power_method",
    "rows_plan",
    "tensor_entry_plan",
    "private_whitened_power_method",
    "whitened_online_power_method",
    "whitened_rows_plan",
]
