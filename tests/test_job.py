"""The release job end to end, its bad-request catalogue, and crash behaviour."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp
from spark_dp.cli.main import main as cli_main
from spark_dp.privacy import open_ledger
from tests._crash_job import run_crash_job
from tests._jobs import DELETE, charges, override, write_config, written

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_data(path, n=400, nan_rows=0, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * 0.5
    X[:nan_rows, 1] = np.nan
    pq.write_table(pa.table({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2],
                             "name": [f"n{i}" for i in range(n)]}), path)
    return X


def _config(tmp_path, **over):
    cfg = {
        "release_id": "job-001",
        "dataset": {"id": "t.points", "path": str(tmp_path / "data.parquet"), "format": "parquet",
                    "columns": ["x1", "x2", "x3"]},
        "task": "second_moment",
        "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
        "params": {},
        "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
        "output": {"path": str(tmp_path / "releases")},
    }
    return override(cfg, over)


def test_job_releases_then_reuses(spark, tmp_path, capsys):
    X = _write_data(tmp_path / "data.parquet", nan_rows=7)
    path = write_config(tmp_path, _config(tmp_path))
    assert cli_main(["release", path]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["reused"] is False and first["dataset_epsilon_spent"] > 0
    rel = spark_dp.load_release(first["path"])
    m = rel.manifest
    assert m["task"] == "second_moment" and m["mechanism"] == "analyze_gauss"
    for key in ("release_id", "dataset_id", "params", "created_at", "library_version", "config_sha256", "payload"):
        assert key in m
    for key in ("epsilon", "delta", "neighbors", "sensitivity", "norm_bound", "sampler"):
        assert key in m["privacy"]
    assert m["privacy"]["sensitivity"] == 1.0 and m["policies"]["nonfinite"] == "drop"
    keep = X[~np.isnan(X).any(axis=1)]
    keep = keep * np.minimum(1, 1 / np.linalg.norm(keep, axis=1, keepdims=True))
    assert np.max(np.abs(rel["matrix"] - keep.T @ keep)) < 8 * m["privacy"]["noise_sigma"]
    # no data-dependent counts in the manifest
    text = json.dumps(m)
    for n in (str(len(X)), str(len(keep)), str(7)):
        assert f": {n}," not in text and f": {n}}}" not in text

    assert cli_main(["release", path]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["reused"] is True and second["dataset_epsilon_spent"] == first["dataset_epsilon_spent"]
    assert np.array_equal(spark_dp.load_release(second["path"])["matrix"], rel["matrix"])
    assert charges(tmp_path) == 1

    assert cli_main(["ledger", "--uri", f"sqlite:///{tmp_path}/ledger.db", "--dataset", "t.points"]) == 0
    out = capsys.readouterr().out
    assert "t.points" in out and "privacy unit" in out
    # the dataset's privacy unit, m and relation, fixed by its first release (issue #12)
    assert out.splitlines()[1].split()[-3:] == ["row", "1", "add_remove"]
    assert cli_main(["ledger", "--uri", f"sqlite:///{tmp_path}/ledger.db", "--dataset", "t.points", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["privacy_unit"], row["max_per_unit"], row["neighbors"]) == ("row", 1, "add_remove")


def test_empty_input_releases_noise(spark, tmp_path, capsys):
    pq.write_table(pa.table({"x1": pa.array([], pa.float64()), "x2": pa.array([], pa.float64()),
                             "x3": pa.array([], pa.float64())}), tmp_path / "data.parquet")
    assert cli_main(["release", write_config(tmp_path, _config(tmp_path))]) == 0
    rel = spark_dp.load_release(json.loads(capsys.readouterr().out)["path"])
    assert rel["matrix"].shape == (3, 3) and np.any(rel["matrix"] != 0)


def test_over_budget_fails_before_spark_and_writes_nothing(tmp_path, capsys):
    _write_data(tmp_path / "data.parquet")
    cfg = _config(tmp_path, **{"privacy.epsilon": 5.0, "ledger.epsilon_limit": 1.0})
    rc = cli_main(["release", write_config(tmp_path, cfg)])
    err = capsys.readouterr().err
    # a refusal has its own exit code (3) and says what the release needs and what is left
    assert rc == 3 and err.startswith("spark-dp: refused: ") and err.count("\n") == 1, err
    assert "needs epsilon=" in err and "left: epsilon=1" in err and "delta_limit" in err
    assert charges(tmp_path) == 0 and written(tmp_path) == []


BAD = [
    ("epsilon_zero", {"privacy.epsilon": 0}, "'privacy.epsilon'"),
    ("epsilon_negative", {"privacy.epsilon": -1}, "'privacy.epsilon'"),
    ("delta_one", {"privacy.delta": 1.0}, "'privacy.delta'"),
    ("delta_zero", {"privacy.delta": 0.0}, "'privacy.delta'"),
    ("norm_bound_zero", {"privacy.norm_bound": 0}, "'privacy.norm_bound'"),
    ("norm_bound_text", {"privacy.norm_bound": "big"}, "'privacy.norm_bound'"),
    ("missing_column", {"dataset.columns": ["x1", "nope"]}, "'nope' not found"),
    ("non_numeric_column", {"dataset.columns": ["x1", "name"]}, "'name' has type string"),
    ("missing_path", {"dataset.path": "/nonexistent/data.parquet"}, "does not exist"),
    ("unknown_mechanism", {"mechanism": "laplace_magic"}, "'mechanism'"),
    ("unknown_task", {"task": "frobnicate"}, "'task'"),
    ("unknown_top_key", {"colour": "blue"}, "'colour'"),
    ("unknown_privacy_key", {"privacy.epsilom": 1.0}, "privacy.epsilom"),
    ("unknown_param", {"params": {"rigde": 1.0}}, "params.rigde"),
    ("bad_neighbors", {"privacy.neighbors": "swap"}, "'privacy.neighbors'"),
    ("bad_sampler", {"privacy.sampler": "fast"}, "'privacy.sampler'"),
    ("bad_nonfinite", {"dataset.nonfinite": "keep"}, "'dataset.nonfinite'"),
    ("bad_format", {"dataset.format": "xlsx"}, "'dataset.format'"),
    ("missing_privacy", {"privacy": DELETE}, "'privacy'"),
    ("missing_epsilon", {"privacy.epsilon": DELETE}, "privacy.epsilon"),
    ("half_limits", {"ledger.delta_limit": DELETE}, "epsilon_limit"),
    ("bad_ledger_uri", {"ledger.uri": "mysql://x/y"}, "'ledger.uri'"),
    ("release_id_path", {"release_id": "../evil"}, "'release_id'"),
    ("max_rows_zero", {"dataset.max_rows_per_unit": 0}, "'dataset.max_rows_per_unit'"),
]


@pytest.mark.parametrize("name, override, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_fail_cleanly(spark, tmp_path, capsys, name, override, needle):
    _write_data(tmp_path / "data.parquet")
    rc = cli_main(["release", write_config(tmp_path, _config(tmp_path, **override))])
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert captured.err.startswith("spark-dp: error: ") and captured.err.count("\n") == 1
    assert needle in captured.err
    assert "Traceback" not in captured.err
    assert charges(tmp_path) == 0 and written(tmp_path) == []


def test_malformed_yaml_and_missing_config(tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_text("privacy: {epsilon: 1.0\n  delta: [")
    assert cli_main(["release", str(p)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert cli_main(["release", str(tmp_path / "none.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "ledger.db").exists()


def test_limit_mismatch_is_refused_before_spark(spark, tmp_path, capsys):
    _write_data(tmp_path / "data.parquet")
    assert cli_main(["release", write_config(tmp_path, _config(tmp_path))]) == 0
    capsys.readouterr()
    cfg = _config(tmp_path, release_id="job-002", **{"ledger.epsilon_limit": 100.0})
    assert cli_main(["release", write_config(tmp_path, cfg)]) == 2
    assert "set-limit" in capsys.readouterr().err
    assert charges(tmp_path) == 1


_run_job_subprocess = run_crash_job  # the release job in a subprocess that SIGKILLs itself (tests/_crash_job.py)


@pytest.mark.parametrize("fault", ["after_charge", "during_write"])
def test_kill_after_charge_keeps_the_charge_and_writes_nothing_visible(spark, tmp_path, capsys, fault):
    _write_data(tmp_path / "data.parquet")
    path = write_config(tmp_path, _config(tmp_path))
    proc = _run_job_subprocess(path, fault)
    assert proc.returncode == -9, proc.stderr[-2000:]
    charge = open_ledger(f"{tmp_path}/ledger.db").lookup("job-001")
    assert charge is not None and not charge.written  # the charge stands: no refund
    assert [d for d in written(tmp_path) if not d.startswith(".")] == []  # no visible release
    # a re-run reports that the charge stands and asks for a new id
    assert cli_main(["release", path]) == 2
    err = capsys.readouterr().err
    assert "charge stands" in err and "new release id" in err
    assert charges(tmp_path) == 1


def test_kill_before_charge_costs_nothing(tmp_path):
    _write_data(tmp_path / "data.parquet")
    proc = _run_job_subprocess(write_config(tmp_path, _config(tmp_path)), "after_check")
    assert proc.returncode == -9
    assert charges(tmp_path) == 0 and written(tmp_path) == []


def test_kill_after_charge_on_the_postgres_ledger(spark, tmp_path, capsys, postgres_base):
    from tests._postgres import create_database

    uri = create_database(postgres_base, "crash_after_charge")
    _write_data(tmp_path / "data.parquet")
    path = write_config(tmp_path, _config(tmp_path, **{"ledger.uri": uri}))
    proc = _run_job_subprocess(path, "after_charge")
    assert proc.returncode == -9, proc.stderr[-2000:]
    charge = open_ledger(uri).lookup("job-001")
    assert charge is not None and not charge.written
    assert [d for d in written(tmp_path) if not d.startswith(".")] == []
    assert cli_main(["release", path]) == 2
    assert "charge stands" in capsys.readouterr().err
    assert open_ledger(uri).status("t.points")[0].releases == 1


def test_a_job_for_another_privacy_unit_is_refused_before_spark(spark, tmp_path, capsys):
    """The dataset's first release fixes its privacy unit; a config for another unit fails cleanly (issue #12)."""
    _write_data(tmp_path / "data.parquet")
    table = pq.read_table(tmp_path / "data.parquet")
    pq.write_table(table.append_column("user", pa.array([f"u{i % 7}" for i in range(table.num_rows)])),
                    tmp_path / "data.parquet")
    first = _config(tmp_path, **{"dataset.privacy_unit": "user", "dataset.max_rows_per_unit": 3})
    assert cli_main(["release", write_config(tmp_path, first)]) == 0
    capsys.readouterr()
    for i, over in enumerate(({"dataset.privacy_unit": DELETE, "dataset.max_rows_per_unit": DELETE},
                              {"privacy.neighbors": "replace"})):
        cfg = _config(tmp_path, release_id=f"job-other-{i}", **{"dataset.privacy_unit": "user", **over})
        assert cli_main(["release", write_config(tmp_path, cfg, name=f"other{i}.yaml")]) == 2
        err = capsys.readouterr().err
        assert "declared in the ledger by its first release" in err and err.count("\n") == 1
        assert charges(tmp_path) == 1 and written(tmp_path) == ["job-001"]
    same_unit = _config(tmp_path, release_id="job-002", **{"dataset.privacy_unit": "user"})  # m = 1: covered
    assert cli_main(["release", write_config(tmp_path, same_unit, name="same.yaml")]) == 0
    assert charges(tmp_path) == 2
