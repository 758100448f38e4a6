"""The detected direct-Parquet path over Spark Connect (issue 15, item 5; spark_dp/aggregates/_scan.py).

A Connect client (no SparkContext) writes a partitioned Parquet catalog
table with saveAsTable, and: a partition filter on it is detected as a
plain scan of the pruned files, a data filter is not, and
``second_moment`` over the filtered table gives the same seeded release
with detection on (direct path, logged) and off (the Spark reader).
"""

from tests._servers import run_connect_client

CLIENT = r'''
import json, logging, sys, tempfile
import numpy as np
from pyspark import SparkContext
from pyspark.sql.connect.session import SparkSession as ConnectSession
import spark_dp.second_moment.api as api
from spark_dp import DPSession
from spark_dp.aggregates._scan import parquet_scan
from spark_dp.privacy import SeededSampler
from spark_dp.runtime import get_spark

spark = get_spark()
assert isinstance(spark, ConnectSession)
spark.addArtifacts(sys.argv[1], pyfile=True)
tmp = tempfile.mkdtemp()
spark.sql(f"CREATE DATABASE fpc LOCATION '{tmp}/wh'")
spark.range(60).selectExpr("CAST(id % 7 AS DOUBLE) / 4 AS a", "CAST(id % 5 AS DOUBLE) / 4 AS b",
                           "CAST(id % 3 AS INT) AS p").write.format("parquet").partitionBy("p").saveAsTable("fpc.t")
table = spark.table("fpc.t")
out = {}
scan = parquet_scan(table.where("p = 1"), ["a", "b"])
out["files"] = scan.files
out["data_filter"] = parquet_scan(table.where("a > 0.5"), ["a", "b"]).reason
lines = []
handler = logging.Handler()
handler.emit = lambda r: lines.append(r.getMessage())
logging.getLogger("spark_dp").addHandler(handler)
logging.getLogger("spark_dp").setLevel(logging.INFO)

def release(tag):
    dp = DPSession("cx", ledger=f"sqlite:///{tmp}/{tag}.db", epsilon_limit=10, delta_limit=1e-3,
                   output=f"{tmp}/{tag}", sampler=SeededSampler(np.random.default_rng(3)))
    return dp.second_moment(table.where("p = 1"), ["a", "b"], epsilon=1.0, delta=1e-6,
                            norm_bound=100.0).arrays["matrix"].tolist()

out["auto"] = release("auto")
out["log"] = [x for x in lines if "path" in x]
api.choose_source_paths = lambda *a, **k: None
out["reader"] = release("reader")
spark.sql("DROP DATABASE fpc CASCADE")
assert SparkContext._active_spark_context is None, "a SparkContext was started"
print(json.dumps(out))
'''


def test_detection_over_spark_connect(tmp_path, connect_server):
    out = run_connect_client(tmp_path, connect_server, CLIENT, name="fast-path-connect")
    assert out["files"] and all("/p=1/" in f for f in out["files"])
    assert "filter on data columns" in out["data_filter"]
    assert any("second_moment: direct Parquet path, detected" in x for x in out["log"]), out["log"]
    assert out["auto"] == out["reader"]
