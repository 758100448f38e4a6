"""The tensor family's mechanisms: names, the data each takes, which are private (no pyspark).

See the table in :mod:`spark_dp.tensor.api`; the config task validates against these.
"""

TENSOR_MECHANISMS = ("power_method", "online_power_method", "private_power_method", "input_perturbation")
TENSOR_NEIGHBORS = ("add_remove", "replace", "tensor_entry")
EXPLICIT_ONLY = ("power_method", "input_perturbation")  # an explicit tensor only
ROWS_ONLY = ("online_power_method",)  # DataFrame rows only
PRIVATE = ("private_power_method", "input_perturbation")
