"""Python API of the second-moment family: ``DPSession.second_moment``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from pyspark.sql import DataFrame

from spark_dp import _validation as V
from spark_dp.aggregates import NONFINITE_POLICIES, gram_matrix, vector_dimension
from spark_dp.privacy import NEIGHBORS, Budget, Chokepoint
from spark_dp.release import Release
from spark_dp.second_moment.analyze_gauss import POSTPROCESS, analyze_gauss, analyze_gauss_plan

if TYPE_CHECKING:
    from spark_dp.session import DPSession

SECOND_MOMENT_MECHANISMS = ("analyze_gauss",)


def second_moment(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    *,
    epsilon: float,
    delta: float,
    norm_bound: float,
    mechanism: str = "analyze_gauss",
    release_id: str | None = None,
    neighbors: str = "add_remove",
    postprocess: str = "none",
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    config_sha256: str | None = None,
) -> Release:
    """Releases a private AᵀA of the rows of ``df[columns]``.

    Args:
        df: the data.
        columns: numeric columns, or one array/vector column (with
            ``dimension``), in the order of the matrix's rows.
        epsilon, delta: the release's (ε, δ).
        norm_bound: B; rows are clipped to ‖a‖₂ ≤ B.
        mechanism: ``analyze_gauss``.
        release_id: idempotency key; a new one is made if None. A release
            id seen before returns the stored release (no new noise or
            charge).
        neighbors: ``add_remove`` (default) or ``replace``.
        postprocess: ``none``, ``psd`` or ``shift``.
        nonfinite: ``drop`` (default) or ``zero`` for rows with NaN/inf/null.
        dimension: vector length for an array/vector column.
        privacy_unit, max_rows_per_unit: contribution bounding per unit.
        config_sha256: digest of the job config, recorded in the manifest.

    Returns:
        A :class:`Release` with array ``matrix`` of shape (d, d).
    """
    owner = "second_moment"
    epsilon = V.check_real("epsilon", epsilon, owner=owner, low=0, low_open=True)
    delta = V.check_real("delta", delta, owner=owner, low=0, high=1, low_open=True, high_open=True)
    norm_bound = V.check_real("norm_bound", norm_bound, owner=owner, low=0, low_open=True)
    V.check_option("mechanism", mechanism, SECOND_MOMENT_MECHANISMS, owner=owner)
    V.check_option("neighbors", neighbors, NEIGHBORS, owner=owner)
    V.check_option("postprocess", postprocess, POSTPROCESS, owner=owner)
    V.check_option("nonfinite", nonfinite, NONFINITE_POLICIES, owner=owner)
    max_rows_per_unit = V.check_int("max_rows_per_unit", max_rows_per_unit, owner=owner, low=1)
    if privacy_unit is not None:
        V.check_str("privacy_unit", privacy_unit, owner=owner)
    columns = list(columns) if not isinstance(columns, str) else columns
    d = vector_dimension(df, columns, dimension)  # schema check, no Spark job

    event, sigma, sensitivity = analyze_gauss_plan(
        epsilon=epsilon, delta=delta, norm_bound=norm_bound, neighbors=neighbors, max_rows_per_unit=max_rows_per_unit
    )
    params = {"postprocess": postprocess}
    request = {
        "dataset_id": session.dataset_id, "task": "second_moment", "mechanism": mechanism, "columns": columns,
        "dimension": d, "params": params, "epsilon": epsilon, "delta": delta, "norm_bound": norm_bound,
        "neighbors": neighbors, "nonfinite": nonfinite, "privacy_unit": privacy_unit,
        "max_rows_per_unit": max_rows_per_unit, "sampler": session.sampler.name, "config_sha256": config_sha256,
    }

    def compute() -> np.ndarray:
        return gram_matrix(
            df, columns, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
            privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
        )

    def noise(gram: np.ndarray, cp: Chokepoint) -> dict[str, np.ndarray]:
        return {"matrix": analyze_gauss(gram, chokepoint=cp, sigma=sigma, sensitivity=sensitivity, postprocess=postprocess)}

    privacy = {
        "epsilon": epsilon, "delta": delta, "neighbors": neighbors, "sensitivity": sensitivity,
        "sensitivity_norm": "l2 of the upper triangle of A^T A", "norm_bound": norm_bound,
        "noise": "gaussian", "noise_sigma": sigma, "calibration": "exact (Balle & Wang 2018)",
        "privacy_unit": privacy_unit or "row", "max_rows_per_unit": max_rows_per_unit,
    }
    return session.run_release(
        task="second_moment", mechanism=mechanism, release_id=release_id, request=request, events=[event],
        budget=Budget(epsilon, delta), compute=compute, noise=noise, privacy=privacy,
        extra={"columns": columns, "params": params, "policies": {
            "nonfinite": nonfinite, "clipping": f"rows scaled to L2 norm <= {norm_bound:g}",
            "null_privacy_unit": "rows with a null unit form one unit" if privacy_unit else None,
        }},
        config_sha256=config_sha256,
    )
