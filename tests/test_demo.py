"""``make demo`` shows its result: the released values with their intervals, what they mean, and what to run next."""

from __future__ import annotations

import re
import warnings

import numpy as np
import yaml

import spark_dp
from spark_dp.cli import demo
from tests._jobs import charges, load_conf, localise


def test_demo_prints_the_released_values_their_intervals_and_the_report_command(spark, tmp_path, monkeypatch,
                                                                                 capsys):
    # the demo's own config with absolute paths under tmp_path (Spark resolves relative ones against its own
    # directory); the fast sampler, as the other job tests
    cfg = localise(load_conf("demo_second_moment.yaml"), tmp_path, data=str(tmp_path / "data" / "demo.parquet"))
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo, "DEMO_CONFIG", str(tmp_path / "demo.yaml"))
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")  # what a console shows: every warning the demo lets through
        assert demo.main() == 0
    assert not [w for w in shown if "does not yet fully support pandas" in str(w.message)], "pandas-3 warning shown"
    out = capsys.readouterr().out
    rel = spark_dp.load_release(str(tmp_path / "releases" / cfg["release_id"]))
    low, high = rel.interval("matrix")
    rows = re.findall(r"^  (x\d) × (x\d)\s+(\S+)\s+\[\s*(\S+),\s*(\S+)\]$", out, flags=re.M)
    assert [(a, b) for a, b, *_ in rows] == [("x1", "x1"), ("x1", "x2"), ("x1", "x3"), ("x2", "x2"), ("x2", "x3"),
                                              ("x3", "x3")]
    for a, b, value, lo, hi in rows:
        i, j = int(a[1]) - 1, int(b[1]) - 1
        for shown, exact in ((value, rel["matrix"][i, j]), (lo, low[i, j]), (hi, high[i, j])):
            assert float(shown.replace(",", "")) == np.round(exact, 1)
    assert "95 % interval" in out and "What it means" in out and "noise-free" in out
    assert re.search(rf"^  \S*spark-dp report {re.escape(rel.path)} ", out, flags=re.M)
    assert out.startswith("example data written to data/") and "Released: demo-second-moment-001" in out
    assert "Budget of dataset 'demo.points'" in out and "left" in out
    # a second run shows the stored release again, charging nothing
    assert demo.main() == 0
    again = capsys.readouterr().out
    assert "Stored release" in again and "nothing new spent" in again and charges(tmp_path) == 1
    assert re.findall(r"^  x.*$", again, flags=re.M) == re.findall(r"^  x.*$", out, flags=re.M)
