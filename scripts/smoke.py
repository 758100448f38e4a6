"""The version-matrix smoke set, run inside a virtualenv that has the *built wheel* installed.

    <venv>/bin/python -I scripts/smoke.py --repo . --workdir /tmp/x [--connect]

Run by tests/test_version_matrix.py in each matrix environment that
scripts/matrix_env.sh makes (pyspark 3.5; pyspark 4.3 + pandas 3). ``-I``
keeps the source tree off ``sys.path``: spark_dp must come from the wheel in
the venv's site-packages (checked on the driver and in a Spark task).

Checks, each printed as ``PASS name (seconds)`` or ``FAIL name: why``:

* ``wheel``: spark_dp imported from site-packages, on the driver and on the executors;
* ``demo``: ``make demo``'s job (conf/demo_second_moment.yaml) through the CLI, a
  private 3×3 matrix within 8σ of the exact clipped AᵀA;
* ``idempotence``: the demo again returns the stored release (same matrix, one charge);
* ``second_moment`` / ``tensor`` / ``count_sketch``: one release of each family
  from its shipped config (conf/);
* ``budget_refusal``: a release past the limit raises BudgetExceededError and
  charges and writes nothing;
* ``connect`` (with ``--connect``): the demo job as a Spark Connect client of a
  local Connect server started from this venv's pyspark.

The last lines are a JSON summary and ``smoke: N passed, N failed``; the exit
code is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import shutil
import sys
import sysconfig
import time
import traceback
from pathlib import Path

import numpy as np
import yaml

RESULTS: list[dict] = []


def check(name: str):
    """Runs the decorated function now as one named check, recording PASS/FAIL and its time."""

    def run(fn):
        t0 = time.monotonic()
        try:
            detail = fn()
        except Exception as exc:  # a failed check is reported, the others still run
            RESULTS.append({"name": name, "ok": False, "seconds": round(time.monotonic() - t0, 1),
                            "error": f"{type(exc).__name__}: {exc}"})
            print(f"FAIL {name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}", flush=True)
        else:
            RESULTS.append({"name": name, "ok": True, "seconds": round(time.monotonic() - t0, 1), "detail": detail})
            print(f"PASS {name} ({time.monotonic() - t0:.1f} s){': ' + str(detail) if detail else ''}", flush=True)
        return fn

    return run


def cli(*argv: str) -> dict:
    """``spark-dp ARGV`` in this process (one SparkSession for all checks); its JSON summary."""
    from spark_dp.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(argv))
    text = out.getvalue()
    assert rc == 0, f"spark-dp {' '.join(argv)} exited {rc}: {text[-2000:]}"
    return json.loads(text[text.index("{"): text.rindex("}") + 1])


def clipped_gram(path: str, columns: list[str], bound: float = 1.0) -> np.ndarray:
    """The exact AᵀA of the Parquet file's columns with rows scaled to norm ≤ bound (what the demo noises)."""
    import pyarrow.parquet as pq

    X = pq.read_table(path, columns=columns).to_pandas().to_numpy(dtype=np.float64)
    X = X * np.minimum(1.0, bound / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300))
    return X.T @ X


def load_servers(repo: Path):
    """tests/_servers.py (ConnectServer), loaded by path: it needs pyspark only, not the source tree."""
    spec = importlib.util.spec_from_file_location("_spark_dp_test_servers", repo / "tests" / "_servers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    """Runs the checks; 0 if all passed."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", type=Path, required=True, help="the checkout (for conf/ and tests/_servers.py)")
    ap.add_argument("--workdir", type=Path, required=True, help="scratch directory (data, ledger, releases)")
    ap.add_argument("--connect", action="store_true", help="also run the Connect check")
    args = ap.parse_args()

    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(args.repo / "conf", work / "conf", dirs_exist_ok=True)
    os.chdir(work)  # the configs' relative paths (data/, releases/) resolve here
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    import pandas
    import pyspark

    import spark_dp

    # This venv's Spark, whatever SPARK_HOME the caller had (another pyspark's JVM would not match).
    os.environ["SPARK_HOME"] = str(Path(pyspark.__file__).resolve().parent)

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    versions = {"python": sys.version.split()[0], "pyspark": pyspark.__version__, "pandas": pandas.__version__,
                "numpy": np.__version__, "spark_dp": spark_dp.__version__}
    t_start = time.monotonic()

    from spark_dp.runtime import get_spark

    spark = get_spark("spark-dp smoke", master="local[2]", conf={"spark.sql.shuffle.partitions": "2",
                                                                   "spark.driver.memory": "1g"})
    versions["spark"] = spark.version  # the JVM's
    print(f"smoke: {versions}", flush=True)

    @check("wheel")
    def _():
        here = Path(spark_dp.__file__).resolve()
        assert here.is_relative_to(site), f"driver imported spark_dp from {here}, not {site}"

        def where(batches):
            import pyarrow as pa

            import spark_dp as s

            for _ in batches:
                yield pa.RecordBatch.from_pydict({"f": [s.__file__]})

        (row,) = spark.range(1, numPartitions=1).mapInArrow(where, "f string").collect()
        assert Path(row.f).resolve().is_relative_to(site), f"executor imported spark_dp from {row.f}"
        return str(here.parent)

    from spark_dp.cli.demo import DEMO_CONFIG, make_demo_data

    demo = {}

    @check("demo")
    def _():
        make_demo_data()
        s = cli("release", DEMO_CONFIG)
        assert s["reused"] is False and s["dataset_id"] == "demo.points", s
        rel = spark_dp.load_release(s["path"])
        sigma = rel.privacy["noise_sigma"]
        err = np.abs(rel["matrix"] - clipped_gram("data/demo.parquet", ["x1", "x2", "x3"])).max()
        assert rel.privacy["private"] is True and err < 8 * sigma, f"error {err:.2f} vs sigma {sigma:.2f}"
        demo.update(summary=s, matrix=rel["matrix"])
        return f"max error {err:.2f} (sigma {sigma:.2f})"

    @check("idempotence")
    def _():
        s = cli("release", DEMO_CONFIG)
        assert s["reused"] is True and s["path"] == demo["summary"]["path"], s
        assert np.array_equal(spark_dp.load_release(s["path"])["matrix"], demo["matrix"])
        assert s["dataset_epsilon_spent"] == demo["summary"]["dataset_epsilon_spent"], s
        from spark_dp.privacy import open_ledger

        (status,) = open_ledger("sqlite:///releases/ledger.db").status("demo.points")
        assert status.releases == 1, status

    # The tensor config with fewer power iterations (each is a pass over the data): the smoke set
    # checks that the family runs on this Spark, tests/test_tensor_* check its accuracy.
    small_tensor = yaml.safe_load(Path("conf/tensor_private_rows.yaml").read_text())
    small_tensor["params"].update(k=1, restarts=2, iterations=2)
    Path("conf/smoke_tensor.yaml").write_text(yaml.safe_dump(small_tensor, sort_keys=False))
    for family, config in [("second_moment", "conf/linear_regression_analyze_gauss.yaml"),
                           ("tensor", "conf/smoke_tensor.yaml"),
                           ("count_sketch", "conf/count_sketch_count_mean.yaml")]:

        @check(family)
        def _(config=config):
            s = cli("release", config)
            assert s["reused"] is False, s
            rel = spark_dp.load_release(s["path"])
            assert rel.privacy["private"] is True and rel.manifest["payload"], rel.manifest
            return f"{rel.manifest['task']}/{rel.manifest['mechanism']}: {sorted(rel.manifest['payload'])}"

    @check("budget_refusal")
    def _():
        from spark_dp.errors import BudgetExceededError

        df = spark.read.parquet("data/demo.parquet")
        ledger = "sqlite:///budget/ledger.db"
        dp = spark_dp.DPSession("smoke.budget", ledger=ledger, epsilon_limit=1.2, delta_limit=1e-5,
                                output="budget/releases")
        dp.second_moment(df, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="b1")
        before = dp.budget()
        try:
            dp.second_moment(df, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="b2")
        except BudgetExceededError as exc:
            message = str(exc)
        else:
            raise AssertionError("a release past the limit was not refused")
        after = dp.budget()
        assert (after.releases, after.spent_epsilon) == (before.releases, before.spent_epsilon), (before, after)
        assert after.releases == 1, after
        assert not (work / "budget" / "releases" / "b2").exists(), "the refused release wrote a directory"
        return message[:80]

    spark.stop()

    if args.connect:

        @check("connect")
        def _():
            servers = load_servers(args.repo.resolve())
            config = yaml.safe_load(Path(DEMO_CONFIG).read_text())
            config["release_id"] = "smoke-connect-001"
            config["ledger"]["uri"] = f"sqlite:///{work / 'connect' / 'ledger.db'}"
            config["output"]["path"] = str(work / "connect" / "releases")
            config["dataset"]["path"] = str(work / "data" / "demo.parquet")
            path = work / "connect" / "release.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            with servers.ConnectServer(work / "connect" / "server", python=sys.executable) as server:
                env = servers.spark_env(work / "connect" / "client-local", SPARK_REMOTE=server.url)
                run = servers.run_client([sys.executable, "-I", "-m", "spark_dp.cli.main", "release", str(path)],
                                         env=env, cwd=work / "connect" / "client", name="connect-release")
                assert run.returncode == 0, run.describe(server)
            out = run.stdout
            s = json.loads(out[out.index("{"): out.rindex("}") + 1])
            rel = spark_dp.load_release(s["path"])
            err = np.abs(rel["matrix"] - clipped_gram("data/demo.parquet", ["x1", "x2", "x3"])).max()
            assert s["reused"] is False and err < 8 * rel.privacy["noise_sigma"], (s, err)
            assert not server.leftovers(), f"Connect server processes left behind: {server.leftovers()}"
            return f"server ready in {server.startup_seconds:.1f} s, release {run.seconds:.1f} s"

    passed = sum(r["ok"] for r in RESULTS)
    failed = len(RESULTS) - passed
    print(json.dumps({"versions": versions, "seconds": round(time.monotonic() - t_start, 1), "checks": RESULTS},
                     default=str))
    print(f"smoke: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
