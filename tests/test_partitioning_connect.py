"""The partitioning rule and the one-expression vector column over Spark Connect (issue #17).

Starts a local Spark Connect server (tests/_servers.py) and runs a client in
a subprocess with SPARK_REMOTE set, where no SparkContext can start: the
rule reads Spark's size estimate through Connect's explain, the task slots
from the session conf, and a privacy-unit release and a fresh-mode tensor
frame plan their exchanges with the rule's count while the session's
``spark.sql.shuffle.partitions`` is 37; the tree step that pre-sums partials
runs over Connect and gives the same Gram matrix.
"""

import re

from tests._servers import run_connect_client

CLIENT = r'''
import json, re, sys, tempfile
from pyspark import SparkContext
from pyspark.sql.connect.session import SparkSession as ConnectSession
from spark_dp import DPSession
from spark_dp.aggregates import _partitioning as P
from spark_dp.aggregates.moments import prepare_rows
from spark_dp.runtime import get_spark

spark = get_spark()
assert isinstance(spark, ConnectSession)
spark.addArtifacts(sys.argv[1], pyfile=True)  # this checkout's spark_dp for the server's Python workers
spark.conf.set("spark.sql.shuffle.partitions", "37")
spark.conf.set("spark.sql.adaptive.enabled", "false")
df = spark.range(400).selectExpr("id % 50 AS u", *[f"rand({i}) / 4 AS `x.{i}`" for i in range(6)])
cols = [f"x.{i}" for i in range(6)]
out = {"estimate": P.estimated_bytes(spark.range(100000)), "slots": P.task_slots(spark), "rule": P.partitions_for(df)}
frame, d = prepare_rows(df, cols, passes=4, seed=1)
out["fresh_plan"] = frame._explain_string(mode="simple")
out["fresh_rows"] = frame.count()
frame.unpersist()
tmp = tempfile.mkdtemp()
dp = DPSession("cx", ledger=f"sqlite:///{tmp}/l.db", epsilon_limit=10, delta_limit=1e-3, output=f"{tmp}/o", sampler="numpy")
rel = dp.second_moment(df, cols, epsilon=1.0, delta=1e-6, norm_bound=1.0, privacy_unit="u", max_rows_per_unit=2)
out["shape"] = list(rel.arrays["matrix"].shape)
# The tree step over Connect (every partial over the threshold): the same exact Gram, and a release through it.
from spark_dp.aggregates import _partials
from spark_dp.aggregates.gram import gram_matrix
flat = gram_matrix(df, cols, norm_bound=1.0)
_partials.TREE_THRESHOLD_BYTES = 0
tree = gram_matrix(df, cols, norm_bound=1.0)
out["tree_gap"] = float(abs(flat - tree).max())
out["tree_plan"] = _partials.tree_reduce(spark.range(0, 5, 1, 5).selectExpr("CAST(CAST(id AS STRING) AS BINARY) AS partial"),
                                         _partials.VectorPartials(1), 5)._explain_string(mode="simple")
rel = dp.second_moment(df, cols, epsilon=1.0, delta=1e-6, norm_bound=0.9, privacy_unit="u", max_rows_per_unit=2)
out["tree_shape"] = list(rel.arrays["matrix"].shape)
assert SparkContext._active_spark_context is None, "a SparkContext was started"
print(json.dumps(out))
'''


def test_rule_and_vector_column_over_spark_connect(tmp_path, connect_server):
    # The client and the server's workers run this checkout's spark_dp (not the installed one).
    out = run_connect_client(tmp_path, connect_server, CLIENT, name="partitioning-connect")
    assert out["estimate"] is not None and 800_000 <= out["estimate"] <= 3_200_000
    assert out["slots"] == 2  # the server's local[2], read from the conf
    assert 1 <= out["rule"] <= 2
    plan = out["fresh_plan"]
    if out["rule"] == 1:  # one partition: the pass frame coalesces, no shuffle at all
        assert "Exchange" not in plan and "Coalesce 1" in plan, plan
    else:
        counts = [int(n) for n in re.findall(r"hashpartitioning\(.*?, (\d+)\), ", plan)]
        assert counts and all(n <= out["rule"] for n in counts), plan
    assert out["fresh_rows"] == 400
    assert out["shape"] == [6, 6]
    assert out["tree_gap"] < 1e-9 and out["tree_shape"] == [6, 6]
    assert "__spark_dp_partial_seq" in out["tree_plan"] and "Sort" in out["tree_plan"], out["tree_plan"]
