"""``spark-dp`` command line.

    spark-dp release CONFIG                 run a release job (also: spark-submit jobs/release.py CONFIG)
    spark-dp ledger --uri URI [--dataset ID] [--set-limit EPS DELTA]

Bad requests print one line ``spark-dp: error: …`` and exit 2 (no traceback).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from spark_dp.errors import SparkDPError

log = logging.getLogger("spark_dp")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("spark_dp").setLevel(logging.INFO)


def _cmd_release(args: argparse.Namespace) -> int:
    from spark_dp.cli.config import load_config
    from spark_dp.cli.job import run_job
    from spark_dp.privacy import open_ledger

    config = load_config(args.config)  # validated before Spark starts
    release = run_job(config)
    status = open_ledger(config.ledger.uri).status(config.dataset.id)
    summary = {
        "release_id": release.release_id,
        "path": release.path,
        "reused": release.reused,
        "epsilon": release.privacy["epsilon"],
        "delta": release.privacy["delta"],
        "dataset_id": config.dataset.id,
        "dataset_epsilon_spent": status[0].spent_epsilon if status else None,
        "dataset_epsilon_remaining": status[0].remaining_epsilon if status else None,
    }
    print(json.dumps(summary, indent=2))
    return 0


def _cmd_ledger(args: argparse.Namespace) -> int:
    from spark_dp.privacy import Budget, open_ledger
    from spark_dp.privacy.ledger import sqlite_path_from_uri
    import os

    path = sqlite_path_from_uri(args.uri)
    if not os.path.isfile(path) and not args.set_limit:
        raise SparkDPError(f"Ledger {args.uri!r} does not exist.")
    ledger = open_ledger(args.uri)
    if args.set_limit:
        if not args.dataset:
            raise SparkDPError("--set-limit needs --dataset.")
        from spark_dp import _validation as V

        eps = V.check_real("--set-limit epsilon", float(args.set_limit[0]), owner="spark-dp ledger", low=0, low_open=True)
        delta = V.check_real("--set-limit delta", float(args.set_limit[1]), owner="spark-dp ledger", low=0, high=1,
                             low_open=True, high_open=True)
        ledger.set_limit(args.dataset, Budget(eps, delta))
    rows = ledger.status(args.dataset)
    if args.dataset and not rows:
        raise SparkDPError(f"Dataset {args.dataset!r} has no entry in ledger {args.uri!r}.")
    if args.json:
        print(ledger.to_json(args.dataset))
        return 0
    print(f"{'dataset':<32} {'releases':>8} {'eps spent':>10} {'eps limit':>10} {'eps left':>10} {'delta':>10}")
    for s in rows:
        print(f"{s.dataset_id:<32} {s.releases:>8} {s.spent_epsilon:>10.4f} {s.limit.epsilon:>10.4g} "
              f"{s.remaining_epsilon:>10.4f} {s.limit.delta:>10.3g}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-dp", description="Differentially private releases on Apache Spark.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", help="run a release job from a YAML config")
    p.add_argument("config", help="path to the job's YAML config")
    p.set_defaults(func=_cmd_release)
    p = sub.add_parser("ledger", help="show what a dataset has spent and has left")
    p.add_argument("--uri", required=True, help="ledger URI, e.g. sqlite:///releases/ledger.db")
    p.add_argument("--dataset", help="only this dataset id")
    p.add_argument("--set-limit", nargs=2, metavar=("EPSILON", "DELTA"), help="set the dataset's limit (recorded)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_ledger)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except SparkDPError as exc:
        print(f"spark-dp: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # e.g. float('abc') on a CLI argument
        print(f"spark-dp: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
