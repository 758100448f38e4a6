"""The smoke set as a Spark Connect client: the Databricks LTS shape (a 3.5 Connect server, a 3.5 client).

    SPARK_REMOTE=sc://127.0.0.1:PORT <venv>/bin/python -I scripts/smoke_connect.py --repo . --workdir /tmp/x

Run by tests/test_connect35.py in the pyspark 3.5 matrix venv (scripts/matrix_env.sh spark35:
the built wheel, pyspark 3.5.7, the Connect client's dependencies installed directly) against a
Connect server of the same Spark started from that venv. Every check goes through the Connect
session (``spark_dp.runtime.get_spark`` picks up ``SPARK_REMOTE``); the server's Python workers
run the same venv. Checks (``PASS``/``FAIL`` lines, then a JSON summary as in scripts/smoke.py):

* ``connect_session``: the session is a Connect session (no SparkContext, no JVM in this process);
* ``second_moment``: ``make demo``'s job, a private 3×3 AᵀA within 8σ of the exact clipped one;
* ``tensor`` / ``count_sketch``: one release of each family from its shipped config;
* ``dry_run``: ``spark-dp release --dry-run`` reads the schema only: nothing charged or written;
* ``budget_refusal``: a release past the limit raises BudgetExceededError, charges and writes nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import yaml


def load_smoke(repo: Path):
    """scripts/smoke.py (its check/cli/clipped_gram helpers), loaded by path: ``-I`` keeps the checkout off sys.path."""
    spec = importlib.util.spec_from_file_location("_spark_dp_smoke", repo / "scripts" / "smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    """Runs the checks over ``SPARK_REMOTE``; 0 if all passed."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", type=Path, required=True, help="the checkout (for conf/ and scripts/smoke.py)")
    ap.add_argument("--workdir", type=Path, required=True, help="scratch directory (data, ledger, releases)")
    args = ap.parse_args()
    assert os.environ.get("SPARK_REMOTE", "").startswith("sc://"), "SPARK_REMOTE must name the Connect server"

    smoke = load_smoke(args.repo.resolve())
    check, cli, clipped_gram = smoke.check, smoke.cli, smoke.clipped_gram
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(args.repo / "conf", work / "conf", dirs_exist_ok=True)
    os.chdir(work)  # the configs' relative paths (data/, releases/) resolve here: the server reads the same disk

    import pandas
    import pyspark

    import spark_dp
    from spark_dp.runtime import get_spark

    spark = get_spark("spark-dp connect smoke")
    versions = {"python": sys.version.split()[0], "pyspark": pyspark.__version__, "pandas": pandas.__version__,
                "numpy": np.__version__, "spark_dp": spark_dp.__version__, "spark": spark.version}
    print(f"smoke_connect: {versions}", flush=True)
    t_start = time.monotonic()

    @check("connect_session")
    def _():
        assert type(spark).__module__ == "pyspark.sql.connect.session", type(spark)
        import pyspark.context

        assert pyspark.context.SparkContext._active_spark_context is None, "a SparkContext exists in the client"
        return f"{type(spark).__module__}, server Spark {spark.version}"

    from spark_dp.cli.demo import DEMO_CONFIG, make_demo_data

    def on_server(config: str, **changes) -> str:
        """``config`` with its input as an absolute path: the server resolves paths in its own working
        directory (as on Databricks, where a job names /Volumes/... or a table, never a relative path).
        """
        cfg = yaml.safe_load(Path(config).read_text())
        cfg["dataset"]["path"] = str(work / cfg["dataset"]["path"])
        for key, value in changes.items():
            cfg["params"][key] = value
        out = Path(config).with_name("connect_" + Path(config).name)
        out.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return str(out)

    @check("second_moment")
    def _():
        make_demo_data()
        s = cli("release", on_server(DEMO_CONFIG))
        assert s["reused"] is False and s["dataset_id"] == "demo.points", s
        rel = spark_dp.load_release(s["path"])
        sigma = rel.privacy["noise_sigma"]
        err = np.abs(rel["matrix"] - clipped_gram("data/demo.parquet", ["x1", "x2", "x3"])).max()
        assert rel.privacy["private"] is True and err < 8 * sigma, f"error {err:.2f} vs sigma {sigma:.2f}"
        again = cli("release", on_server(DEMO_CONFIG))  # the stored release: no new noise, no new charge
        assert again["reused"] is True and again["dataset_epsilon_spent"] == s["dataset_epsilon_spent"], again
        return f"max error {err:.2f} (sigma {sigma:.2f})"

    for family, config, changes in [
            ("tensor", "conf/tensor_private_rows.yaml", {"k": 1, "restarts": 2, "iterations": 2}),  # passes over the data
            ("count_sketch", "conf/count_sketch_count_mean.yaml", {})]:

        @check(family)
        def _(config=config, changes=changes):
            s = cli("release", on_server(config, **changes))
            assert s["reused"] is False, s
            rel = spark_dp.load_release(s["path"])
            assert rel.privacy["private"] is True and rel.manifest["payload"], rel.manifest
            return f"{rel.manifest['task']}/{rel.manifest['mechanism']}: {sorted(rel.manifest['payload'])}"

    @check("dry_run")
    def _():
        from spark_dp.cli.main import main as cli_main
        from spark_dp.privacy import open_ledger

        config = yaml.safe_load(Path(on_server(DEMO_CONFIG)).read_text())
        config.update(release_id="connect-dry-run")
        config["ledger"]["uri"] = "sqlite:///dry/ledger.db"
        config["output"]["path"] = "dry/releases"
        Path("dry").mkdir(exist_ok=True)
        Path("dry/job.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        out = io.StringIO()
        with smoke.contextlib.redirect_stdout(out):
            assert cli_main(["release", "--dry-run", "--json", "dry/job.yaml"]) == 0
        preview = json.loads(out.getvalue())
        assert preview.get("would_refuse") is False, preview
        ledger = Path("dry/ledger.db")
        assert not ledger.exists() or not open_ledger("sqlite:///dry/ledger.db").status(), "a dry run charged"
        assert not Path("dry/releases/connect-dry-run").exists(), "a dry run wrote a release"
        return f"{preview['task']}/{preview['mechanism']}: epsilon {preview['epsilon']}, nothing charged or written"

    @check("budget_refusal")
    def _():
        from spark_dp.errors import BudgetExceededError

        df = spark.read.parquet(str(work / "data" / "demo.parquet"))
        dp = spark_dp.DPSession("smoke.budget", ledger="sqlite:///budget/ledger.db", epsilon_limit=1.2,
                                delta_limit=1e-5, output="budget/releases")
        dp.second_moment(df, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="b1")
        before = dp.budget()
        try:
            dp.second_moment(df, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="b2")
        except BudgetExceededError as exc:
            message = str(exc)
        else:
            raise AssertionError("a release past the limit was not refused")
        after = dp.budget()
        assert (after.releases, after.spent_epsilon) == (before.releases, before.spent_epsilon) and after.releases == 1
        assert not (work / "budget" / "releases" / "b2").exists(), "the refused release wrote a directory"
        return message[:80]

    spark.stop()
    results = smoke.RESULTS
    passed = sum(r["ok"] for r in results)
    failed = len(results) - passed
    print(json.dumps({"versions": versions, "seconds": round(time.monotonic() - t_start, 1), "checks": results},
                     default=str))
    print(f"smoke_connect: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
