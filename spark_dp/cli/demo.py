"""``make demo``: make a small demo dataset, run conf/demo_second_moment.yaml, show what it released.

Prints the released matrix with its intervals in a short table, what the
numbers mean, what the release spent and what the dataset has left, and the
commands to see more. Running it twice releases nothing new: the release id
is in the ledger, so the stored release is returned (no new noise, no new
charge) and shown again.
"""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np

from spark_dp.cli.example_data import write_example_data

DEMO_CONFIG = "conf/demo_second_moment.yaml"
DEMO_DATA = "data/demo.parquet"


def make_demo_data(path: str = DEMO_DATA) -> None:
    """Writes the demo dataset to ``path`` and the other example datasets conf/ uses beside it."""
    root = os.path.dirname(path) or "."
    written = write_example_data(root)
    if written:
        print(f"example data written to {root}/ ({len(written)} files: the demo's and what every config in conf/ "
              "reads)")
    if not os.path.exists(path):
        shutil.copyfile(os.path.join(root, "demo.parquet"), path)


def _num(v: float) -> str:
    return f"{v:,.1f}" if abs(v) >= 1 else f"{v:.3g}"


def _spark_dp() -> str:
    """How to call the CLI here: ``spark-dp`` when it is on PATH, else the virtualenv's script (``make demo``)."""
    script = os.path.join(os.path.dirname(sys.executable), "spark-dp")
    on_path = shutil.which("spark-dp")
    if on_path and os.path.realpath(on_path) == os.path.realpath(script) or not os.path.exists(script):
        return "spark-dp"
    return os.path.relpath(script) if not os.path.relpath(script).startswith("..") else script


def describe(release, *, stored: bool, left: tuple[float, float] | None, ledger_uri: str) -> str:
    """The demo's summary of a second-moment release: values, intervals, meaning, budget, next commands."""
    m, p = release.manifest, release.privacy
    cols = list(m.get("columns") or [])
    matrix = np.asarray(release["matrix"])
    low, high = release.interval("matrix")
    level = release.confidence or 0.95
    width = max(len(f"{a} × {b}") for a in cols for b in cols)
    lines = [
        f"{'Stored release (this id ran before: nothing new spent)' if stored else 'Released'}: "
        f"{release.release_id} — the private second-moment matrix AᵀA of {', '.join(cols)} "
        f"({m.get('mechanism')}, ε = {p['epsilon']:g}, δ = {p['delta']:g}).",
        "",
        f"  {'entry':<{width}}  {'value':>12}  {f'{100 * level:g} % interval':>27}",
    ]
    for i in range(len(cols)):
        for j in range(i, len(cols)):
            lines.append(f"  {f'{cols[i]} × {cols[j]}':<{width}}  {_num(matrix[i, j]):>12}  "
                         f"[{_num(low[i, j]):>11}, {_num(high[i, j]):>11}]")
    lines += [
        "",
        "What it means: entry (a, b) is the sum over all rows of a·b (rows first scaled to length ≤ "
        f"{p.get('norm_bound', 1):g}), plus Gaussian noise of σ = {p.get('noise_scale', float('nan')):.3g} that "
        "protects every single row. The interval holds the exact, noise-free sum with "
        f"{100 * level:g} % probability. Divide by the number of rows for second moments (covariances of "
        "centred data).",
    ]
    if left is not None:
        lines.append(f"Budget of dataset {m.get('dataset_id')!r}: ε {left[0]:.3g} of {left[1]:g} left "
                     f"({_spark_dp()} ledger --uri {ledger_uri}).")
    lines += [
        "",
        "See more:",
        f"  {_spark_dp()} report {release.path}    # plots, every interval, the privacy spent (Markdown next to it)",
        f"  {_spark_dp()} release --dry-run {DEMO_CONFIG}    # what a release costs before running it",
        "  docs/your_own_table.md    # the same with your own CSV or Parquet file, in five minutes",
    ]
    return "\n".join(lines)


def main() -> int:
    """``make demo``: writes the demo data, runs its release on an embedded local Spark, prints the result."""
    from spark_dp.cli.config import load_config
    from spark_dp.cli.job import run_job, session_for
    from spark_dp.cli.main import quiet_pandas_warning
    from spark_dp.errors import SparkDPError

    make_demo_data()
    try:
        with quiet_pandas_warning():  # as the spark-dp commands: no pyspark pandas-3 warning on the console
            config = load_config(DEMO_CONFIG)
            stored = session_for(config).stored_release(config.release_id, config_sha256=config.sha256) is not None
            release = run_job(config)
            status = {s.dataset_id: s for s in session_for(config).ledger.status()}.get(config.dataset.id)
    except SparkDPError as exc:
        print(f"spark-dp demo: error: {exc}", file=sys.stderr)
        return 2
    left = None if status is None else (status.remaining_epsilon, status.limit.epsilon)
    print()
    print(describe(release, stored=stored, left=left, ledger_uri=config.ledger.uri))
    return 0


if __name__ == "__main__":
    sys.exit(main())
