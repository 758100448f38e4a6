"""``spark-dp release --dry-run`` and ``spark-dp plan run --dry-run``: JSON on stdout, exit 0, nothing written.

Each dry run is followed by the real run, whose manifest and ledger must say
what the dry run predicted (σ, events, budget after, refusals).
"""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_dp.cli.main import main as cli_main
from spark_dp.privacy import open_ledger
from spark_dp.release import load_release
from tests._jobs import override, write_config
from tests.test_plans import WEEK, _cov_entry, _write_plan, events_table  # noqa: F401 - the fixture


def _config(tmp_path, **over):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3)) * 0.4
    pq.write_table(pa.table({"x1": X[:, 0], "x2": X[:, 1], "y": X[:, 2]}), tmp_path / "data.parquet")
    cfg = {
        "release_id": "dry-001",
        "dataset": {"id": "t.points", "path": str(tmp_path / "data.parquet"), "format": "parquet",
                    "columns": ["x1", "x2"], "label": "y"},
        "task": "linear_regression",
        "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 2.0, "neighbors": "replace", "sampler": "numpy"},
        "params": {},
        "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
        "output": {"path": str(tmp_path / "releases")},
    }
    return override(cfg, over)


def _listing(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def test_release_dry_run_prints_the_plan_writes_nothing_and_matches_the_release(spark, tmp_path, capsys):
    path = write_config(tmp_path, _config(tmp_path))
    before = _listing(tmp_path)
    assert cli_main(["release", "--dry-run", "--json", "--n", "60", path]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert _listing(tmp_path) == before  # no ledger file, no release directory
    assert preview["dry_run"] is True and not preview["would_refuse"] and not preview["stored"]
    assert preview["cost"] == {"epsilon": 1.0, "delta": 1e-6}
    assert preview["budget"]["registered"] is False and preview["budget"]["epsilon_spent_before"] == 0.0
    assert any("does not exist yet" in n for n in preview["notes"])
    assert preview["accuracy"]["per_coefficient"][0]["n"] == 60

    assert cli_main(["release", path]) == 0
    summary = json.loads(capsys.readouterr().out)
    m = load_release(summary["path"]).manifest
    assert preview["privacy"]["noise_scale"] == m["privacy"]["noise_scale"]
    assert preview["privacy"]["sensitivity"] == m["privacy"]["sensitivity"]
    assert preview["events"] == m["privacy"]["events"] and preview["request_sha256"] == m["request_sha256"]
    assert preview["budget"]["epsilon_spent_after"] == summary["dataset_epsilon_spent"]

    # again: the release id is known, so the release would return the stored one for nothing
    ledger = open_ledger(f"sqlite:///{tmp_path}/ledger.db")
    charges = ledger.all_charges()
    assert cli_main(["release", "--dry-run", "--json", path]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["stored"] and again["cost"]["epsilon"] == 0.0 and ledger.all_charges() == charges


def test_release_dry_run_reports_a_refusal_with_exit_0(spark, tmp_path, capsys):
    path = write_config(tmp_path, _config(tmp_path, **{"privacy.epsilon": 5.0}))
    assert cli_main(["release", "--dry-run", "--json", path]) == 0
    out, err = capsys.readouterr()
    preview = json.loads(out)
    assert preview["would_refuse"] and "would be exceeded" in preview["reason"] and "would be refused" in err
    assert not (tmp_path / "ledger.db").exists() and not (tmp_path / "releases").exists()
    assert cli_main(["release", path]) == 3  # the real run refuses (exit 3: a budget refusal), nothing charged
    assert open_ledger(f"sqlite:///{tmp_path}/ledger.db").all_charges() == []
    assert cli_main(["release", "--n", "5", path]) == 2  # --n without --dry-run is a request error


def test_plan_dry_run_checks_entries_one_after_the_other_and_writes_nothing(spark, tmp_path, events_table, capsys):  # noqa: F811
    uri = f"sqlite:///{tmp_path}/plan-ledger.db"
    entries = [_cov_entry(events_table), _cov_entry(events_table, name="cov_again", epsilon=1.0)]
    path = _write_plan(tmp_path, uri, entries)
    day = WEEK[0].isoformat()
    before = _listing(tmp_path)
    assert cli_main(["plan", "run", path, "--date", day, "--dry-run"]) == 0
    out, err = capsys.readouterr()
    dry = {r["entry"]: r for r in json.loads(out)["entries"]}
    assert _listing(tmp_path) == before
    # each alone fits the day's budget of 1.0; after cov's 0.6, cov_again's 1.0 does not (1.04 > 1.0)
    assert dry["cov"]["status"] == "would_release" and dry["cov_again"]["status"] == "would_refuse"
    assert "would be refused" in err and dry["cov"]["preview"]["cost"]["epsilon"] == 0.6

    assert cli_main(["plan", "run", path, "--date", day]) == 3
    real = {r["entry"]: r for r in json.loads(capsys.readouterr().out)["entries"]}
    assert real["cov"]["status"] == "released" and real["cov_again"]["status"] == "refused"
    m = load_release(real["cov"]["path"]).manifest
    assert dry["cov"]["preview"]["privacy"]["noise_scale"] == m["privacy"]["noise_scale"]
    assert dry["cov"]["preview"]["events"] == m["privacy"]["events"]
    assert dry["cov"]["preview"]["budget"]["epsilon_spent_after"] == \
        open_ledger(uri).status("shop.events@2026-11-23")[0].spent_epsilon

    assert cli_main(["plan", "run", path, "--date", day, "--dry-run", "--entry", "cov"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"][0]["status"] == "stored"


def _csv_config(tmp_path, **dataset):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3)) * 0.4
    with open(tmp_path / "data.csv", "w") as f:
        f.write("name,x1,x2,y\n" + "".join(f"r{i},{a:.6f},{b:.6f},{c:.6f}\n" for i, (a, b, c) in enumerate(X)))
    over = {"dataset.path": str(tmp_path / "data.csv"), "dataset.format": "csv"}
    return _config(tmp_path, **over, **{f"dataset.{k}": v for k, v in dataset.items()})


def test_a_csv_dry_run_with_dataset_schema_runs_no_spark_job(spark, tmp_path, capsys):
    """dataset.schema: Spark reads CSV without the inference scan, so the dry run touches no data at all."""
    schema = "name STRING, x1 DOUBLE, x2 DOUBLE, y DOUBLE"
    sc = spark.sparkContext  # tests only: the library never touches the SparkContext
    seen = {}
    for case, cfg in (("schema", _csv_config(tmp_path, schema=schema)), ("inferred", _csv_config(tmp_path))):
        sc.setJobGroup(f"csv-{case}", case)
        try:
            assert cli_main(["release", "--dry-run", "--json", write_config(tmp_path, cfg)]) == 0
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        seen[case] = (json.loads(capsys.readouterr().out), list(sc.statusTracker().getJobIdsForGroup(f"csv-{case}")))
    (with_schema, jobs), (inferred, inferred_jobs) = seen["schema"], seen["inferred"]
    assert jobs == [] and not any("infer" in n for n in with_schema["notes"])
    assert inferred_jobs and any("give dataset.schema" in n for n in inferred["notes"])  # the scan is said, not hidden
    assert with_schema["privacy"] == inferred["privacy"]

    # the real release reads with the schema too
    assert cli_main(["release", write_config(tmp_path, _csv_config(tmp_path, schema=schema))]) == 0
    m = load_release(json.loads(capsys.readouterr().out)["path"]).manifest
    assert m["privacy"]["noise_scale"] == with_schema["privacy"]["noise_scale"]


def test_a_bad_dataset_schema_is_refused_naming_it_and_nothing_is_charged(spark, tmp_path, capsys):
    from spark_dp.cli.config import load_config
    from spark_dp.errors import ConfigError

    cfg = _csv_config(tmp_path, schema="name STRING, x1 DOUBL")
    assert cli_main(["release", write_config(tmp_path, cfg)]) != 0
    assert "dataset.schema" in capsys.readouterr().err
    assert open_ledger(f"sqlite:///{tmp_path}/ledger.db").all_charges() == []  # nothing charged
    assert not os.path.exists(tmp_path / "releases")  # nothing written
    for over, words in (({"schema": "x1 DOUBLE", "options": {"inferSchema": True}}, "inferSchema"),
                        ({"schema": 5}, "dataset.schema")):
        with pytest.raises(ConfigError, match=words):
            load_config(write_config(tmp_path, _csv_config(tmp_path, **over)))


def test_release_dry_run_text_leads_with_the_coefficients_and_folds_the_matrices(spark, tmp_path, capsys):
    """Without --json: cost, then one line per coefficient with the best case and the best case times the factors
    measured on real tables (median, 5-95 %); then the intervals' summary; matrices and the rule only with
    --verbose."""
    from spark_dp.release.preview import REALISTIC_FACTORS

    cfg = _config(tmp_path)
    cfg["dataset"]["bounds"] = {"x1": [-1.0, 1.0], "x2": [-2.0, 2.0], "y": [-3.0, 3.0]}
    cfg["privacy"].pop("norm_bound", None)
    cfg["params"] = {**cfg.get("params", {}), "fit_intercept": True}
    path = write_config(tmp_path, cfg)
    assert cli_main(["release", "--dry-run", "--json", "--n", "5000", path]) == 0
    preview = json.loads(capsys.readouterr().out)
    row = preview["accuracy"]["coefficients"]["per_coefficient"][0]
    assert row["n"] == 5000
    factors = REALISTIC_FACTORS["analyze_gauss"]
    for term, hw in row["half_width"].items():
        for key in ("min", "p05", "median", "p95", "max"):
            assert row["half_width_measured"][key][term] == pytest.approx(factors[key] * hw)
    assert cli_main(["release", "--dry-run", "--n", "5000", path]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("Dry run: linear_regression") and lines[1] == "Cost: ε 1, δ 1e-06."
    head = lines.index(next(ln for ln in lines if ln.startswith("Predicted 95 % half-width of each coefficient")))
    terms = [ln.split()[0] for ln in lines[head + 2: head + 2 + len(row["half_width"])]]
    assert terms == list(row["half_width"]) == ["x1", "x2", "intercept"]
    assert "cannot be known before the data is seen" in text and "[[" not in text
    assert "matrix" not in text.split("(--")[0]
    assert "Intervals: coefficients and intercept: kind interval" in text and "Marked conservative at n = 5,000" in text
    assert "design_floor" not in text  # the whole rule: --verbose
    assert cli_main(["release", "--dry-run", "--verbose", "--n", "5000", path]) == 0
    verbose = capsys.readouterr().out
    assert "half_width_matrix:" in verbose and len(verbose.splitlines()) > len(lines) + 8
    assert "intervals.rule:" in verbose and "design_floor" in verbose
    assert not (tmp_path / "releases").exists() and not (tmp_path / "ledger.db").exists()  # nothing written
    assert cli_main(["release", "--json", path]) == 2  # --json belongs to --dry-run
