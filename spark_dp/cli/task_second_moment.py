"""Task ``second_moment``: a private AᵀA of the dataset's columns."""

from __future__ import annotations

from spark_dp import _validation as V
from spark_dp.cli.tasks import TaskSpec, register
from spark_dp.second_moment import POSTPROCESS, analyze_gauss_plan
from spark_dp.second_moment.api import SECOND_MOMENT_MECHANISMS

OWNER = "the config"


def _plan(config):
    event, _, _ = analyze_gauss_plan(
        epsilon=config.privacy.epsilon, delta=config.privacy.delta, norm_bound=config.privacy.norm_bound,
        neighbors=config.privacy.neighbors, max_rows_per_unit=config.dataset.max_rows_per_unit,
    )
    return [event]


def _run(session, config, spark):
    from spark_dp.aggregates import read_dataset

    df = read_dataset(spark, config.dataset.path, config.dataset.format, config.dataset.options)
    return session.second_moment(
        df,
        list(config.dataset.columns),
        epsilon=config.privacy.epsilon,
        delta=config.privacy.delta,
        norm_bound=config.privacy.norm_bound,
        mechanism=config.mechanism,
        release_id=config.release_id,
        neighbors=config.privacy.neighbors,
        postprocess=config.params.get("postprocess", "none"),
        nonfinite=config.dataset.nonfinite,
        dimension=config.dataset.dimension,
        privacy_unit=config.dataset.privacy_unit,
        max_rows_per_unit=config.dataset.max_rows_per_unit,
        config_sha256=config.sha256,
    )


SPEC = register(TaskSpec(
    name="second_moment",
    mechanisms=SECOND_MOMENT_MECHANISMS,
    params={"postprocess": lambda k, v: V.check_option(k, v, POSTPROCESS, owner=OWNER)},
    plan=_plan,
    run=_run,
))
