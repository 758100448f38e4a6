"""Input lineage over Spark Connect (issue #16, item 4): no SparkContext, no JVM, no Spark job over the rows.

Starts a local Spark Connect server (tests/_servers.py) and runs a client in a
subprocess with SPARK_REMOTE set: the lineage of a Parquet read (its digest
equals the pyarrow listing of the path a job re-run uses), of a plain Parquet
catalog table (named, no version, with the file digest) and of an in-memory
DataFrame, and a second-moment release whose manifest and ledger charge carry
it.
"""

from tests._servers import run_connect_client

CLIENT = r'''
import json, os, sys, tempfile
from pyspark import SparkContext
from pyspark.sql.connect.session import SparkSession as ConnectSession
from spark_dp import DPSession
from spark_dp.release import lineage as L
from spark_dp.runtime import get_spark

spark = get_spark()
assert isinstance(spark, ConnectSession)
spark.addArtifacts(sys.argv[1], pyfile=True)  # this checkout's spark_dp for the server's Python workers
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "rows")
spark.range(50).selectExpr("id / 50.0 AS x", "id % 7 / 7.0 AS y", "id % 3 AS g").write.partitionBy("g").parquet(path)
spark.read.parquet(path).write.format("parquet").saveAsTable("lineage_cx")
dp = DPSession("cx", ledger=f"sqlite:///{tmp}/l.db", epsilon_limit=10, delta_limit=1e-3, output=f"{tmp}/o",
               sampler="numpy")
key = dp.ledger.lineage_key
out = {"files": L.input_lineage(spark.read.parquet(path), key), "listed": L.path_lineage(path, key),
       "table": L.input_lineage(spark.table("lineage_cx").filter("x > 0"), key),
       "memory": L.input_lineage(spark.range(3).selectExpr("id * 1.0 AS x"), key)}
rel = dp.second_moment(spark.read.parquet(path), ["x", "y"], epsilon=1.0, delta=1e-6, norm_bound=1.0,
                       release_id="cx-1")
out["manifest"], out["charge"] = rel.manifest["input"], dp.ledger.lookup("cx-1").lineage
spark.sql("DROP TABLE lineage_cx")
assert SparkContext._active_spark_context is None, "a SparkContext was started"
print(json.dumps(out))
'''


def test_lineage_over_spark_connect(tmp_path, connect_server):
    out = run_connect_client(tmp_path, connect_server, CLIENT, name="lineage-connect")
    assert out["files"]["kind"] == "files" and out["files"] == out["listed"]
    [table] = out["table"]["tables"]
    assert table["name"].endswith("lineage_cx") and table["provider"] == "parquet" and table["version"] is None
    assert len(out["table"]["files_hmac_sha256"]) == 64
    assert out["memory"] == {"kind": "in_memory"}
    assert out["manifest"] == out["charge"] == out["files"]
