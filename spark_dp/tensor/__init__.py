"""Tensor decomposition by the (online, private) tensor power method.

Wang & Anandkumar, "Online and Differentially-Private Tensor Decomposition",
NIPS 2016: Alg. 1 (:func:`robust_tensor_power_method`), Alg. 2
(:func:`online_tensor_power_method`), Alg. 3
(:func:`private_tensor_power_method`), the private method over rows
(:func:`private_online_power_method`) and the input-perturbation baseline
(:func:`input_perturbation`).
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

__all__ = [
    "CALIBRATIONS",
    "MODES",
    "PrivatePlan",
    "TensorDecomposition",
    "input_perturbation",
    "input_perturbation_plan",
    "online_tensor_power_method",
    "private_online_power_method",
    "private_tensor_power_method",
    "robust_tensor_power_method",
    "rows_plan",
    "tensor_entry_plan",
]
