"""A plan over Spark Connect: table in (dataset.table + where), table out (output.table), job tags, idempotent re-run.

Starts a local Spark Connect server (tests/_servers.py) and runs the client
in a subprocess with SPARK_REMOTE set, where SparkContext cannot start.
"""

import json
import sys

from tests._servers import run_client, spark_env

CLIENT = r'''
import json, sys
from pyspark import SparkContext
from pyspark.sql.connect.session import SparkSession as ConnectSession
from spark_dp.cli.main import main
from spark_dp.cli.job import spark_tag
from spark_dp.runtime import get_spark

plan_path, loc, db = sys.argv[1:4]
spark = get_spark()
assert isinstance(spark, ConnectSession)
spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{loc}'")
if not spark.catalog.tableExists(f"{db}.points"):
    rows = [(ds, float(i % 7) / 10, float(i % 5) / 10, float(i % 3) / 10) for ds in ("2026-11-29", "2026-11-30")
            for i in range(30)]
    spark.createDataFrame(rows, "ds string, x1 double, x2 double, x3 double").write.saveAsTable(f"{db}.points")
with spark_tag(spark, "spark-dp:probe"):
    tags = sorted(spark.getTags())
codes = [main(["plan", "run", plan_path, "--date", "2026-11-30"]) for _ in range(2)]
rows = spark.table(f"{db}.releases").groupBy("release_id").count().collect()
assert SparkContext._active_spark_context is None, "a SparkContext was started"
print(json.dumps({"codes": codes, "tags": tags, "rows": {r["release_id"]: r["count"] for r in rows}}))
'''


def test_plan_with_tables_over_spark_connect(tmp_path, connect_server):
    import yaml

    db = "plans_connect"
    plan = {"plan": "cx", "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db"}, "output": {"path": str(tmp_path / "rel")},
            "entries": [{"name": "cov", "schedule": "daily",
                         "budget": {"epsilon": 1.0, "delta": 1e-5, "renew": "per_period"},
                         "inline": {"dataset": {"id": "cx.points", "table": f"{db}.points", "where": "ds = '${date}'",
                                                "columns": ["x1", "x2", "x3"]},
                                    "task": "second_moment", "mechanism": "analyze_gauss",
                                    "privacy": {"epsilon": 0.5, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
                                    "ledger": {"uri": "x"}, "output": {"path": "x", "table": f"{db}.releases"}}}]}
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan))
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = spark_env(tmp_path / "client-local", SPARK_REMOTE=connect_server.url)
    (tmp_path / "client").mkdir()
    run = run_client([sys.executable, str(script), str(plan_path), str(tmp_path / "wh"), db], env=env,
                     cwd=tmp_path / "client", name="plan-connect")
    assert run.returncode == 0, run.describe(connect_server)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["codes"] == [0, 0]  # released, then stored
    assert "spark-dp:probe" in out["tags"]  # SparkSession.addTag works over Connect
    assert out["rows"] == {"cx.cov.2026-11-30": 9}  # appended once, not again on the re-run
