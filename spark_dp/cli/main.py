"""``spark-dp`` command line.

    spark-dp release CONFIG                 run a release job (also: spark-submit jobs/release.py CONFIG)
    spark-dp release --dry-run [--n N] CONFIG   what it would cost and how accurate it would be (JSON; spends nothing)
    spark-dp ledger --uri URI [--dataset ID] [--set-limit EPS DELTA] [--set-lifetime-limit EPS DELTA]
                    [--record-crash RELEASE_ID REASON] [--keep-unit-of PERIOD_ID] [--charges]
                    [--export PATH.parquet|TABLE] [--export-format parquet|delta|iceberg] [--json]
    spark-dp estimate RELEASE_DIR --items FILE            item,estimate,low,high CSV from a count_sketch release
    spark-dp heavy-hitters RELEASE_DIR [--candidates PATH] [--top N] [--threshold T]
    spark-dp plan run PLAN --date YYYY-MM-DD [--entry NAME ...] [--dry-run]   run (or preview) what a plan has due
    spark-dp plan status PLAN [--date YYYY-MM-DD] [--json]        spent/left per budget period, lifetime caps
    spark-dp report RELEASE_DIR [--out FILE]                      Markdown/HTML report with plots
    spark-dp audit --ledger URI OUTPUT_ROOT [--json]              releases vs ledger charges (exit 1 on problems)

Exit codes: 0 done; 2 a bad request (one line ``spark-dp: error: …``, no traceback); 3 a budget
refusal (one line ``spark-dp: refused: …``: what the release needs, what is spent and left; nothing
charged or written; ``plan run`` exits 3 too when an entry is refused); 1 ``audit`` found a problem,
or ``plan run`` had an entry fail.

``--master URL`` (or the ``SPARK_DP_MASTER`` variable) chooses the master of the local session the
command starts (default ``local[N]``, N = this machine's cores); ignored under ``spark-submit`` and
with ``SPARK_REMOTE`` (Spark Connect).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator

from spark_dp.errors import BudgetExceededError, SparkDPError

EXIT_ERROR = 2  # a bad request
EXIT_REFUSED = 3  # a budget refusal: the request was fine, the dataset's budget cannot pay for it

log = logging.getLogger("spark_dp")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("spark_dp").setLevel(logging.INFO)


SPENT_NOTE = ("dataset_epsilon_spent is the exact composition of all the dataset's charges, stated at its "
              "dataset_delta_limit: not the sum of the releases' epsilons (each at its own delta), so it can be "
              "less than one release's epsilon and grows less than their sum")


def _cmd_release(args: argparse.Namespace) -> int:
    from spark_dp.cli.config import load_config
    from spark_dp.cli.job import run_job
    from spark_dp.privacy import open_ledger

    config = load_config(args.config)  # validated before Spark starts
    if args.dry_run:
        from spark_dp.cli.job import preview_job

        preview = preview_job(config, n=args.n)  # nothing read but the schema, nothing charged or written
        if args.json:
            print(json.dumps(preview.to_dict(), indent=2))
        else:
            from spark_dp.cli.preview_text import render_preview

            print(render_preview(preview.to_dict(), n=args.n, verbose=args.show_all))
        if preview.would_refuse:
            print(f"spark-dp: dry run: the release would be refused: {preview.reason}", file=sys.stderr)
        return 0
    if args.n is not None or args.json or args.show_all:
        raise SparkDPError("--n, --json and --verbose (after 'release') apply to --dry-run only.")
    release = run_job(config)  # the job path, then output.table if set
    status = open_ledger(config.ledger.uri).status(config.dataset.id)
    summary = {
        "release_id": release.release_id,
        "path": release.path,
        "table": config.output.table,
        "reused": release.reused,
        "input_changed": release.input_changed,  # a reused release: its input changed since (None: cannot tell)
        "epsilon": release.privacy["epsilon"],  # what this release was calibrated to (epsilon at its own delta)
        "delta": release.privacy["delta"],
        "dataset_id": config.dataset.id,
        "dataset_epsilon_spent": status[0].spent_epsilon if status else None,
        "dataset_epsilon_remaining": status[0].remaining_epsilon if status else None,
        "dataset_epsilon_limit": status[0].limit.epsilon if status else None,
        "dataset_delta_limit": status[0].limit.delta if status else None,
        "note": SPENT_NOTE,
    }
    print(json.dumps(summary, indent=2))
    return 0


def _cmd_ledger(args: argparse.Namespace) -> int:
    import os

    from spark_dp.privacy import Budget, open_ledger
    from spark_dp.privacy.ledger import sqlite_path_from_uri

    if not args.uri.startswith(("postgresql://", "postgres://")):  # a PostgreSQL ledger is created on first use
        path = sqlite_path_from_uri(args.uri)
        if not os.path.isfile(path) and not (args.set_limit or args.set_lifetime_limit):
            raise SparkDPError(f"Ledger {args.uri!r} does not exist.")
    ledger = open_ledger(args.uri, strict=not args.keep_unit_of)  # choosing a group's unit opens a mixed ledger
    if args.keep_unit_of:
        ledger.keep_group_unit(args.keep_unit_of)
    if args.set_limit:
        if not args.dataset:
            raise SparkDPError("--set-limit needs --dataset.")
        from spark_dp import _validation as V

        eps = V.check_real("--set-limit epsilon", float(args.set_limit[0]), owner="spark-dp ledger", low=0, low_open=True)
        delta = V.check_real("--set-limit delta", float(args.set_limit[1]), owner="spark-dp ledger", low=0, high=1,
                             low_open=True, high_open=True)
        ledger.set_limit(args.dataset, Budget(eps, delta))
    if args.set_lifetime_limit:
        if not args.dataset:
            raise SparkDPError("--set-lifetime-limit needs --dataset.")
        from spark_dp import _validation as V

        eps = V.check_real("--set-lifetime-limit epsilon", float(args.set_lifetime_limit[0]), owner="spark-dp ledger",
                           low=0, low_open=True)
        delta = V.check_real("--set-lifetime-limit delta", float(args.set_lifetime_limit[1]), owner="spark-dp ledger",
                             low=0, high=1, low_open=True, high_open=True)
        ledger.set_lifetime_limit(args.dataset, Budget(eps, delta))
    if args.record_crash:
        ledger.record_crash(args.record_crash[0], args.record_crash[1])
    if args.export:
        from spark_dp.ledger_table import export_charges, export_charges_table, is_table_target

        if is_table_target(args.export):  # a catalog table: through Spark (classic or Connect)
            from spark_dp.params import check_table_name
            from spark_dp.runtime import get_spark

            check_table_name(args.export, key="--export")  # before Spark starts
            fmt = args.export_format
            spark = get_spark("spark-dp ledger export", formats=(fmt,) if fmt else ())
            n = export_charges_table(spark, ledger, args.export, format=fmt)
            print(json.dumps({"export": args.export, "table": True, **({"format": fmt} if fmt else {}), "charges": n}))
            return 0
        if args.export_format not in (None, "parquet"):
            raise SparkDPError(f"--export-format {args.export_format} applies to a table target; "
                               f"{args.export!r} is a Parquet file path.")
        n = export_charges(ledger, args.export)
        print(json.dumps({"export": args.export, "charges": n}))
        return 0
    if args.charges:
        from spark_dp.ledger_table import charge_rows

        rows = [r for r in charge_rows(ledger) if not args.dataset or args.dataset in (r["dataset"], r["ledger_dataset"])]
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        print(f"{'seq':>6} {'release id':<36} {'ledger dataset':<32} {'mechanism':<22} {'epsilon':>9} {'delta':>9} "
              f"{'lifetime eps':>12}  status")
        for r in rows:
            status = "written" if r["written"] else ("crashed" if r["crash"] else "not written")
            life = "-" if r["lifetime_epsilon"] is None else f"{r['lifetime_epsilon']:.4f}"
            print(f"{r['seq']:>6} {r['release_id']:<36} {r['ledger_dataset']:<32} {r['mechanism'] or '-':<22} "
                  f"{r['epsilon']:>9.4g} {r['delta']:>9.3g} {life:>12}  {status}")
        return 0
    rows = ledger.status(args.dataset)
    if args.dataset and not rows:
        raise SparkDPError(f"Dataset {args.dataset!r} has no entry in ledger {args.uri!r}.")
    if args.json:
        print(ledger.to_json(args.dataset))
        return 0
    print(f"{'dataset':<32} {'releases':>8} {'eps spent':>10} {'eps limit':>10} {'eps left':>10} {'delta_limit':>11}  "
          f"{'privacy unit':<16} {'m':>4}  neighbours")
    for s in rows:
        # The privacy unit is fixed by the dataset's first release; '-' until then. Its stored form: row,
        # tensor_entry or column:<name> (a column may be named row).
        unit, m, rel = (s.unit.stored, str(s.unit.max_per_unit), s.unit.neighbors) if s.unit else ("-", "-", "-")
        print(f"{s.dataset_id:<32} {s.releases:>8} {s.spent_epsilon:>10.4f} {s.limit.epsilon:>10.4g} "
              f"{s.remaining_epsilon:>10.4f} {s.limit.delta:>11.3g}  {unit:<16} {m:>4}  {rel}")
    lifetimes = ([lt] if (lt := ledger.lifetime_status(args.dataset)) else []) if args.dataset else \
        ledger.lifetime_statuses()
    if lifetimes:
        # A lifetime cap covers the dataset and all its periods <dataset>@<period> (exact composition).
        print(f"\n{'lifetime of dataset':<32} {'periods':>8} {'releases':>8} {'eps spent':>10} {'eps limit':>10} "
              f"{'eps left':>10} {'delta_limit':>11}")
        for lt in lifetimes:
            print(f"{lt.dataset_id:<32} {lt.periods:>8} {lt.releases:>8} {lt.spent_epsilon:>10.4f} "
                  f"{lt.limit.epsilon:>10.4g} {lt.remaining_epsilon:>10.4f} {lt.limit.delta:>11.3g}")
    if rows:
        print("\neps spent: the exact composition of the dataset's charges at its delta_limit (not the sum of the "
              "releases' epsilons, each stated at its own delta)")
    return 0


def _add_sketch_commands(sub) -> None:
    """``estimate`` and ``heavy-hitters``: post-processing of count_sketch releases (no budget)."""

    def _write_csv(rows, header: str = "item") -> None:
        import csv

        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow([header, "estimate"])
        for item, est in rows:
            out.writerow(["" if item is None else item, repr(float(est))])

    def _say_cut(note: str | None) -> None:
        if note is not None:  # fewer than --top: say what cut them (stderr: stdout stays CSV)
            print(f"spark-dp: heavy-hitters: {note}", file=sys.stderr)

    def _estimate(args: argparse.Namespace) -> int:
        import csv
        import os

        from spark_dp.release import load_release
        from spark_dp.sketch.estimate import SketchView, coerce_items
        from spark_dp.sketch.uncertainty import estimate_bounds

        release = load_release(args.release_dir)
        view = SketchView.of(release)
        if not os.path.isfile(args.items):
            raise SparkDPError(f"Items file {args.items!r} does not exist.")
        with open(args.items, encoding="utf-8") as fh:
            lines = [ln.rstrip("\n") for ln in fh if ln.rstrip("\n") != ""]
        items = coerce_items(lines, view.kind, parse=True)
        # low/high: noise and hash collisions together, at the release's level (sketch/uncertainty.py); NaN where
        # refused, the reason on stderr (stdout stays CSV)
        got = estimate_bounds(release, items)
        est, low, high = got.estimates, got.low, got.high
        print(f"spark-dp: estimate: intervals ({got.kind}, covers {got.covers}): {got.method}", file=sys.stderr)
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(["item", "estimate", "low", "high"])
        for row in zip(items, est, low, high, strict=True):
            out.writerow(["" if row[0] is None else row[0], *(repr(float(v)) for v in row[1:])])
        return 0

    def _heavy_hitters(args: argparse.Namespace) -> int:
        import os

        from spark_dp.release import load_release
        from spark_dp.sketch.estimate import SketchView, heavy_hitters

        release = load_release(args.release_dir)
        view = SketchView.of(release)
        top = args.top
        if args.candidates is None and view.stack is not None:
            # dyadic release: decode the released stack (post-processing); a hashed domain yields hashed ids
            rows = heavy_hitters(release, None, top=top, threshold=args.threshold)
            _write_csv(rows, "hashed_id" if view.hash_seed is not None else "item")
            _say_cut(rows.note)
            return 0
        if args.candidates is None:
            stored = (release.manifest.get("heavy_hitters") or {}).get("items")
            if stored is None:
                raise SparkDPError("Release has no heavy hitters of its own; give --candidates PATH "
                                   "(or build the release with heavy_hitters.levels for none).")
            from spark_dp.sketch.estimate import heavy_hitters_note

            hh = release.manifest["heavy_hitters"]
            rows = [(r["item"], r["estimate"]) for r in stored]
            if args.threshold is not None:
                rows = [r for r in rows if r[1] >= args.threshold]
            rows = rows[: top or len(rows)]
            _write_csv(rows)
            # stored at release: at most the release's top, cut by its threshold (or by --threshold here)
            want = min(top or hh.get("top") or len(rows), hh.get("top") or len(rows))
            thr = args.threshold if args.threshold is not None else hh.get("threshold")
            _say_cut(heavy_hitters_note(len(rows), want, thr, "given" if args.threshold is not None
                                        else hh.get("threshold_rule")))
            if top and hh.get("top") and top > hh["top"]:
                _say_cut(f"the release stored its top {hh['top']}; more need --candidates")
            return 0
        from spark_dp.sketch.estimate import check_candidate_files, check_candidates_location, release_source

        # Candidates must be public: the output lists those whose estimate clears the threshold, so
        # candidates read from the release's own input would publish which items the private data holds.
        manifest = release.manifest
        if release_source(manifest) is None:
            log.warning("release %s records no input location (older or API release without 'source'): "
                        "cannot check that --candidates is not the sketched data", release.release_id)
        is_table = args.format == "table" and not args.candidates.endswith(".txt")
        if is_table:
            from spark_dp.params import check_table_name

            check_table_name(args.candidates, key="--candidates")
            check_candidates_location(args.candidates, manifest, param="--candidates", table=True)
        else:
            if not os.path.exists(args.candidates) and "://" not in args.candidates:
                raise SparkDPError(f"Candidates path {args.candidates!r} does not exist.")
            check_candidates_location(args.candidates, manifest, param="--candidates")
        if args.candidates.endswith(".txt"):
            from spark_dp.cli.task_count_sketch import read_candidates

            cands, col = read_candidates(None, args.candidates, "text", "", view.kind)
        else:
            from spark_dp.aggregates import read_dataset
            from spark_dp.runtime import get_spark

            col = args.column or manifest["columns"][0]
            spark = get_spark("spark-dp heavy-hitters")
            if is_table:
                from spark_dp.cli.task_count_sketch import qualified_table

                check_candidates_location(args.candidates, manifest, param="--candidates", table=True,
                                          qualified=qualified_table(spark, args.candidates))
            cands = read_dataset(spark, args.candidates, args.format)
            check_candidate_files(cands.inputFiles(), manifest, param="--candidates")
        rows = heavy_hitters(release, cands, col, top=top, threshold=args.threshold)
        _write_csv(rows)
        _say_cut(rows.note)
        return 0

    p = sub.add_parser("estimate", help="frequency estimates with their noise intervals from a count_sketch "
                                         "release (item,estimate,low,high CSV)")
    p.add_argument("release_dir", help="the release directory (a path or an s3://, gs://, abfss://, hdfs:// URI)")
    p.add_argument("--items", required=True, help="file with one item a line")
    p.set_defaults(func=_estimate)
    p = sub.add_parser("heavy-hitters", help="top items by estimate from a count_sketch release (item,estimate CSV)")
    p.add_argument("release_dir", help="the release directory (a path or an s3://, gs://, abfss://, hdfs:// URI)")
    p.add_argument("--candidates", help="PUBLIC candidate items: a .txt file (one item a line), a dataset with the "
                   "item column, or a table name with --format table. Never the sketched data or anything derived "
                   "from it: the output lists the candidates that clear the threshold, so private candidates would "
                   "publish which items the data holds; the release's own input path (or a file or directory "
                   "inside it) or table is refused. For a hashed dyadic release, the candidates whose hash is a "
                   "decoded heavy id (without: the hashed ids, CSV header hashed_id,estimate)")
    p.add_argument("--column", help="candidate column in a dataset (default: the release's item column)")
    p.add_argument("--format", default="parquet",
                   help="format of a candidate dataset: parquet (default), csv, json, orc, or table")
    p.add_argument("--top", type=int, default=None, help="how many (default: the release's heavy_hitters.top)")
    p.add_argument("--threshold", type=float, default=None,
                   help="minimum estimate (default: the release-time threshold in the manifest)")
    p.set_defaults(func=_heavy_hitters)


def _add_plan_commands(sub) -> None:
    """``plan run`` and ``plan status``: scheduled releases (:mod:`spark_dp.plans`)."""

    def _run(args: argparse.Namespace) -> int:
        from dataclasses import asdict

        from spark_dp.plans import load_plan, run_plan
        from spark_dp.plans.plan import parse_date

        plan = load_plan(args.plan)
        results = run_plan(plan, parse_date(args.date), entries=args.entry, dry_run=args.dry_run)
        out = {"plan": plan.name, "date": args.date, **({"dry_run": True} if args.dry_run else {}),
               "entries": [{k: v for k, v in asdict(r).items() if k != "preview" or args.dry_run} for r in results]}
        print(json.dumps(out, indent=2))
        if args.dry_run:  # refusals are what a dry run is for: reported above, not an error
            for r in results:
                if r.status == "would_refuse":
                    print(f"spark-dp: dry run: entry {r.entry!r} would be refused: {r.message}", file=sys.stderr)
            return 1 if any(r.status == "failed" for r in results) else 0
        bad = [r for r in results if r.status in ("refused", "failed")]
        for r in bad:
            print(f"spark-dp: {r.status}: entry {r.entry!r}: {r.message}", file=sys.stderr)
        return 3 if any(r.status == "refused" for r in bad) else (1 if bad else 0)

    def _status(args: argparse.Namespace) -> int:
        from spark_dp.plans import load_plan, plan_lifetimes, plan_status
        from spark_dp.plans.plan import parse_date

        plan = load_plan(args.plan)
        rows = plan_status(plan, on=parse_date(args.date) if args.date else None)
        lifetimes = plan_lifetimes(plan)
        if args.json:
            print(json.dumps({"periods": [r.to_dict() for r in rows], "lifetime": [r.to_dict() for r in lifetimes]},
                             indent=2))
            return 0
        print(f"{'ledger dataset':<36} {'renew':<10} {'entries':<24} {'releases':>8} {'eps spent':>10} "
              f"{'eps limit':>10} {'eps left':>10} {'delta':>9}")
        for r in rows:
            print(f"{r.ledger_dataset:<36} {r.renew:<10} {','.join(r.entries):<24} {r.releases:>8} "
                  f"{r.epsilon_spent:>10.4f} {r.epsilon_limit:>10.4g} {r.epsilon_left:>10.4f} {r.delta_limit:>9.3g}")
        if lifetimes:
            # periods left: computed by the accountant (exact composition of the charged events and k more
            # periods at the latest period's spend), the same check the ledger makes at each charge.
            print(f"\n{'lifetime of dataset':<28} {'periods':>7} {'eps spent':>10} {'eps limit':>10} {'delta':>9} "
                  f"{'eps/period':>10} {'periods left':>12}  first refused")
            for r in lifetimes:
                per = "-" if r.per_period_epsilon is None else f"{r.per_period_epsilon:.4f}"
                left = "-" if r.periods_left is None else (f">={r.periods_left}" if r.periods_left_at_least
                                                           else str(r.periods_left))
                print(f"{r.dataset:<28} {r.periods_charged:>7} {r.epsilon_spent:>10.4f} {r.epsilon_limit:>10.4g} "
                      f"{r.delta_limit:>9.3g} {per:>10} {left:>12}  {r.first_refused_period or '-'}")
        return 0

    p = sub.add_parser("plan", help="release plans: recurring releases with per-period budgets")
    psub = p.add_subparsers(dest="plan_command", required=True)
    q = psub.add_parser("run", help="run the entries due on a date (idempotent: a re-run returns stored releases)")
    q.add_argument("plan", help="the plan's YAML file")
    q.add_argument("--date", required=True, help="the data date, YYYY-MM-DD")
    q.add_argument("--entry", action="append", help="only this entry (repeatable)")
    q.add_argument("--dry-run", action="store_true",
                   help="print what each due entry would cost (checked after the earlier entries' charges) and how "
                        "accurate it would be; reads only the inputs' schemas, charges and writes nothing")
    q.set_defaults(func=_run)
    q = psub.add_parser("status", help="spent and left per budget period; lifetime caps: spent and periods left")
    q.add_argument("plan", help="the plan's YAML file")
    q.add_argument("--date", help="also show the period containing this date (YYYY-MM-DD)")
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=_status)


def _add_report_command(sub) -> None:
    """``report``: a Markdown (or HTML) report of one release with plots (:mod:`spark_dp.report`)."""

    def _report(args: argparse.Namespace) -> int:
        from spark_dp.report import write_report

        out = write_report(args.release_dir, out=args.out)
        print(json.dumps({"report": out.path, "plots": out.plots, "privacy": out.privacy}, indent=2))
        return 0

    p = sub.add_parser("report", help="write a Markdown/HTML report with plots for a release directory")
    p.add_argument("release_dir", help="the release directory (a path or an s3://, gs://, abfss://, hdfs:// URI)")
    p.add_argument("--out", help="report file (.md or .html, a path or URI; default RELEASE_DIR.report.md)")
    p.set_defaults(func=_report)


def _add_audit_command(sub) -> None:
    """``audit``: every release directory against the ledger's charges, and every charge against the releases."""

    def _audit(args: argparse.Namespace) -> int:
        import os

        from spark_dp.audit import audit_releases, format_report
        from spark_dp.privacy import open_ledger
        from spark_dp.privacy.ledger import sqlite_path_from_uri

        if not args.ledger.startswith(("postgresql://", "postgres://")) and \
                not os.path.isfile(sqlite_path_from_uri(args.ledger)):
            raise SparkDPError(f"Ledger {args.ledger!r} does not exist.")  # never create one by auditing
        report = audit_releases(open_ledger(args.ledger, strict=False), args.output_root)  # reports mixed units
        print(json.dumps(report.to_dict(), indent=2) if args.json else format_report(report))
        for f in report.problems:
            print(f"spark-dp: audit: {f.kind}: release {f.release_id or '-'}: {f.message}", file=sys.stderr)
        return 0 if report.ok else 1

    p = sub.add_parser("audit", help="check every release directory against the ledger's charges and every charge "
                                     "against the releases (exit 1 on orphans, mismatches, missing or unwritten)")
    p.add_argument("--ledger", required=True, help="ledger URI, e.g. sqlite:///releases/ledger.db")
    p.add_argument("output_root", help="the output root the releases were written under (output.path; a path or URI)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_audit)


def build_parser() -> argparse.ArgumentParser:
    """The ``spark-dp`` command line: one subcommand per action."""
    parser = argparse.ArgumentParser(prog="spark-dp", description="Differentially private releases on Apache Spark.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress at INFO")
    parser.add_argument("--master", help="master URL of the local Spark session a command starts (default: "
                        "$SPARK_DP_MASTER, else local[N] with N = this machine's cores); ignored under spark-submit "
                        "and with SPARK_REMOTE")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", help="run a release job from a YAML config")
    p.add_argument("config", help="path to the job's YAML config")
    p.add_argument("--dry-run", action="store_true",
                   help="print what the release would cost and how accurate it would be (a short summary; --json "
                        "for everything), reading only the input's schema; nothing is charged or written")
    p.add_argument("--n", type=int, default=None,
                   help="with --dry-run: your guess of the number of rows, for the accuracy prediction")
    p.add_argument("--json", action="store_true", help="with --dry-run: print the whole preview as JSON")
    p.add_argument("--verbose", dest="show_all", action="store_true",
                   help="with --dry-run: also show the predicted matrices and every detail")
    p.set_defaults(func=_cmd_release)
    p = sub.add_parser("ledger", help="show what a dataset has spent and has left")
    p.add_argument("--uri", required=True, help="ledger URI, e.g. sqlite:///releases/ledger.db")
    p.add_argument("--dataset", help="only this dataset id")
    p.add_argument("--set-limit", nargs=2, metavar=("EPSILON", "DELTA"), help="set the dataset's limit (recorded)")
    p.add_argument("--set-lifetime-limit", nargs=2, metavar=("EPSILON", "DELTA"),
                   help="set the lifetime cap over the dataset and all its periods DATASET@PERIOD (recorded)")
    p.add_argument("--keep-unit-of", metavar="DATASET_ID",
                   help="make this period's declared privacy unit and neighbours its lifetime group's (for a ledger "
                        "whose periods mixed units; recorded)")
    p.add_argument("--record-crash", nargs=2, metavar=("RELEASE_ID", "REASON"),
                   help="record that a charged release failed before being written (the charge stands)")
    p.add_argument("--charges", action="store_true", help="list the charges (one per release) instead of datasets")
    p.add_argument("--export", metavar="PATH_OR_TABLE",
                   help="write every charge to a Parquet file (a path with '/' or ending in .parquet; pyarrow, atomic) "
                        "or replace the catalog table TABLE (db.tbl; through Spark)")
    p.add_argument("--export-format", choices=("parquet", "delta", "iceberg"), default=None,
                   help="the format of the --export TABLE (default: the session's default table format); "
                        "delta/iceberg: a local session gets their jars")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_ledger)
    _add_sketch_commands(sub)
    _add_plan_commands(sub)
    _add_report_command(sub)
    _add_audit_command(sub)
    return parser


@contextlib.contextmanager
def quiet_pandas_warning() -> Iterator[None]:
    """Hides pyspark's pandas-3 FutureWarning inside the block (the command line and ``make demo``).

    pyspark 4.x warns on every pandas >= 3 use that its own pandas features
    may not all work; spark-dp's use of pandas is tested on pandas 3 (README,
    "Supported versions"), so the commands say nothing.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
        yield


def main(argv: list[str] | None = None) -> int:
    """Runs ``spark-dp``; returns the exit code (2 a request error, 3 a budget refusal: one line each)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    if args.master:
        os.environ["SPARK_DP_MASTER"] = args.master  # read by spark_dp.runtime.get_spark
    with quiet_pandas_warning():
        try:
            return int(args.func(args) or 0)
        except BudgetExceededError as exc:
            print(f"spark-dp: refused: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        except SparkDPError as exc:
            print(f"spark-dp: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except ValueError as exc:  # e.g. float('abc') on a CLI argument
            print(f"spark-dp: error: {exc}", file=sys.stderr)
            return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
