"""The library's logs carry no data-dependent values (docs/privacy.md, "What the library never reveals").

Every log record of the ``spark_dp`` loggers (at DEBUG, so nothing is filtered) is captured while one session
releases from each family — ``second_moment`` (``norm_bound="auto"`` and the clipping report),
``linear_regression`` (with a privacy unit), ``pca``, ``count_sketch`` and ``tensor_decomposition`` (fresh
mode, the direct Parquet path) — on two datasets read back from Parquet that differ in everything a log line
could leak: row count (40 vs 530), file count (1 vs 4), NaN rows, clipped rows, units, items.

The two runs use the same dataset ids, release ids and parameters, each on a fresh ledger (so the ledger
entry numbers logged with each charge are the same), in two different directories. The one normalisation
before the lines are compared is the run's directory (a path the caller chose, replaced by ``<root>``); no
timestamps, durations or generated ids reach these lines, so nothing else is normalised and any other
difference fails the test. :func:`test_the_comparison_catches_a_logged_file_count` shows it fails on the
file count the direct-Parquet detection once logged at INFO.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from spark_dp.privacy import NumpySampler
from spark_dp.session import DPSession

DATASETS = {  # rows, files, share of NaN rows, share of clipped rows
    "small": (40, 1, 0.0, 0.05),
    "large": (530, 4, 0.2, 0.4),
}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _write(spark, root, name: str) -> str:
    n, files, nan_share, clip_share = DATASETS[name]
    rng = np.random.default_rng(len(name))
    x = rng.normal(0, 0.2, size=(n, 3))
    clip = rng.uniform(size=n) < clip_share
    x[clip] *= 40.0  # far above the norm bound 1
    x[rng.uniform(size=n) < nan_share, 1] = np.nan
    pdf = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "y": x[:, 0] - x[:, 2],
                        "u": rng.integers(0, max(n // 3, 1), size=n),
                        "item": rng.choice([f"i{j}" for j in range(n // 5 + 2)], size=n)})
    path = str(root / "data")
    spark.createDataFrame(pdf).repartition(files).write.parquet(path)
    return path


def _run_all(spark, root, name: str) -> list[logging.LogRecord]:
    """Every ``spark_dp`` log record of one release per family on dataset ``name`` under ``root``."""
    path = _write(spark, root, name)
    df = spark.read.parquet(path)
    logger = logging.getLogger("spark_dp")
    handler, level = _Capture(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        s = DPSession("logs.side_channel", ledger=f"sqlite:///{root}/ledger.db", epsilon_limit=100.0,
                      delta_limit=1e-2, output=str(root / "out"), sampler=NumpySampler())
        s.second_moment(df, ["a", "b", "c"], epsilon=1.0, delta=1e-6, norm_bound="auto", clipping_report=True,
                        release_id="log-sm")
        units = DPSession("logs.side_channel.units", ledger=f"sqlite:///{root}/ledger.db", epsilon_limit=100.0,
                          delta_limit=1e-2, output=str(root / "out"), sampler=NumpySampler())  # one unit per id
        units.linear_regression(df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, norm_bound=1.0, privacy_unit="u",
                                max_rows_per_unit=3, release_id="log-lr")
        s.pca(df, ["a", "b", "c"], k=1, epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="log-pca")
        s.count_sketch(df, "item", epsilon=1.0, delta=1e-6, repetitions=3, buckets=64, release_id="log-cs")
        s.tensor_decomposition(df, ["a", "b", "c"], k=1, epsilon=1.0, delta=1e-6, norm_bound=1.0, restarts=2,
                               iterations=2, mode="fresh", release_id="log-td")
        s.second_moment(df, ["a", "b", "c"], epsilon=1.0, delta=1e-6, norm_bound="auto", clipping_report=True,
                        release_id="log-sm")  # a re-run: the stored release
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return handler.records


def _lines(records: list[logging.LogRecord], root) -> list[str]:
    """Each record as 'logger LEVEL message', the run's directory replaced by <root> (the only normalisation)."""
    return [f"{r.name} {r.levelname} {r.getMessage()}".replace(str(root), "<root>") for r in records]


def _differences(a: list[str], b: list[str]) -> list[tuple[str | None, str | None]]:
    out = [(x, y) for x, y in zip(a, b) if x != y]
    if len(a) != len(b):
        out.append((f"{len(a)} lines", f"{len(b)} lines"))
    return out


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    out = {}
    for name in DATASETS:
        root = tmp_path_factory.mktemp(f"logs_{name}")
        out[name] = (root, _run_all(spark, root, name))
    return out


def test_no_log_line_depends_on_the_data(runs):
    (ra, a), (rb, b) = runs["small"], runs["large"]
    la, lb = _lines(a, ra), _lines(b, rb)
    assert len(la) >= 10  # the releases did log (paths taken, charges, writes, the stored re-run)
    assert any("direct Parquet path" in line for line in la)  # the detection whose message once carried a count
    assert _differences(la, lb) == [], "log lines differ between two datasets"


def test_the_comparison_catches_a_logged_file_count(spark, tmp_path_factory, monkeypatch):
    """The old detection message (a plain Parquet scan of N file(s)) differs between the datasets: caught."""
    import spark_dp.aggregates._scan as scan

    real = scan.parquet_scan

    def old_message(df, columns):
        got = real(df, columns)
        return got if got.files is None else scan.Scan(got.files, f"a plain Parquet scan of {len(got.files)} file(s)")

    monkeypatch.setattr(scan, "parquet_scan", old_message)
    lines = {}
    for name in DATASETS:
        root = tmp_path_factory.mktemp(f"logs_old_{name}")
        path = _write(spark, root, name)
        logger = logging.getLogger("spark_dp")
        handler, level = _Capture(), logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            s = DPSession("logs.old", ledger=f"sqlite:///{root}/ledger.db", epsilon_limit=10.0, delta_limit=1e-3,
                          output=str(root / "out"), sampler=NumpySampler())
            s.second_moment(spark.read.parquet(path), ["a", "b"], epsilon=1.0, delta=1e-6, norm_bound=1.0,
                            release_id="log-old")
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
        lines[name] = _lines(handler.records, root)
    diff = _differences(lines["small"], lines["large"])
    assert diff and all("file(s)" in x for x, _ in diff), diff
