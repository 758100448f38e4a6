import numpy as np

import spark_dp
from spark_dp.privacy import SeededSampler


def test_second_moment_end_to_end(spark, tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 3)) * 0.3
    df = spark.createDataFrame([tuple(map(float, r)) for r in X], ["a", "b", "c"])
    dp = spark_dp.DPSession("t.smoke", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=5, delta_limit=1e-5,
                            output=str(tmp_path / "out"), sampler=SeededSampler(np.random.default_rng(0)))
    rel = dp.second_moment(df, ["a", "b", "c"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="r1")
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    Xc = X * np.minimum(1, 1 / norms)
    assert rel["matrix"].shape == (3, 3)
    assert np.allclose(rel["matrix"], rel["matrix"].T)
    # noise sigma is 4.2247: the release is within 8 sigma of the exact matrix
    assert np.max(np.abs(rel["matrix"] - Xc.T @ Xc)) < 8 * 4.3
    assert rel.manifest["privacy"]["private"] is False
    again = dp.second_moment(df, ["a", "b", "c"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="r1")
    assert again.reused and np.array_equal(again["matrix"], rel["matrix"])
    assert dp.budget().releases == 1
