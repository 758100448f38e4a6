"""No data-dependent values in manifests, logs, ledgers or error messages.

A release over data with distinctive counts (rows, NaN rows, clipped rows)
must not mention any of those counts anywhere but in the (noisy) payload.
"""

import json
import logging
import re
import sqlite3

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_dp.cli.main import main as cli_main

N, N_NAN, N_CLIPPED = 1237, 71, 389


_HEX_DIGEST = re.compile(r"\b(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{16,}\b")


def _tokens(text: str) -> set[str]:
    # Digests (config sha256, the keyed input HMAC, seeds in hex) are random-looking hex: their digit
    # runs are not counts, and one such run equal to a count made this test fail by chance.
    return set(re.findall(r"(?<![\d.])\d+(?![\d.])", _HEX_DIGEST.sub("<hex>", text)))


def test_outputs_carry_no_exact_counts(spark, tmp_path, caplog, capsys):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(N, 3)) * 0.01
    X[:N_CLIPPED] *= 1000.0  # these rows exceed the norm bound and get clipped
    X[N_CLIPPED:N_CLIPPED + N_NAN, 0] = np.nan
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "c": X[:, 2]}), tmp_path / "d.parquet")
    cfg = {
        "release_id": "side-1",
        "dataset": {"id": "side.ds", "path": str(tmp_path / "d.parquet"), "columns": ["a", "b", "c"]},
        "task": "second_moment", "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
        "ledger": {"uri": f"sqlite:///{tmp_path}/l.db", "epsilon_limit": 2.0, "delta_limit": 1e-5},
        "output": {"path": str(tmp_path / "out")},
    }
    (tmp_path / "c.yaml").write_text(json.dumps(cfg))
    with caplog.at_level(logging.DEBUG, logger="spark_dp"):
        assert cli_main(["-v", "release", str(tmp_path / "c.yaml")]) == 0
        # and an over-budget error on the same data
        cfg["release_id"] = "side-2"
        cfg["privacy"]["epsilon"] = 3.0
        (tmp_path / "c2.yaml").write_text(json.dumps(cfg))
        assert cli_main(["release", str(tmp_path / "c2.yaml")]) == 3  # a budget refusal
    out = capsys.readouterr()
    texts = {
        "manifest": (tmp_path / "out" / "side-1" / "manifest.json").read_text(),
        "logs": "\n".join(r.getMessage() for r in caplog.records),
        "stdout": out.out,
        "stderr": out.err,
        "ledger": "\n".join(str(r) for t in ("charges", "releases", "datasets")
                            for r in sqlite3.connect(tmp_path / "l.db").execute(f"SELECT * FROM {t}")),
    }
    # pytest's numbered tmp dirs (…/pytest-389/…) appear in paths: not data.
    texts = {k: v.replace(str(tmp_path), "<tmp>") for k, v in texts.items()}
    secrets = {str(v) for v in (N, N - N_NAN, N_NAN, N_CLIPPED, N_CLIPPED - 0, N - N_CLIPPED - N_NAN)}
    for where, text in texts.items():
        leaked = _tokens(text) & secrets
        assert not leaked, f"{where} mentions data-dependent counts {leaked}"
    assert "budget" in texts["stderr"]
