"""docs/your_own_table.md runs as written: its blocks tagged for execution, in order, in an empty directory.

Tags (the fence's info string after the language, which Markdown renderers ignore): ``python run`` —
executed as a Python script; ``yaml file=NAME`` — written to NAME; ``sh run`` — each line a command,
``spark-dp …`` lines through the CLI's own entry point. All in one process started in that directory
(one Spark for the whole page; Spark resolves the page's relative paths against the process's own
directory), which reports each command's exit code and output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "your_own_table.md")
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(kind, argument, body) of every block tagged for execution: ``python``, ``file`` (argument: its name),
    ``sh``; untagged blocks are left out."""
    out = []
    for lang, info, body in FENCE.findall(text):
        tags = info.split()
        if lang == "python" and "run" in tags:
            out.append(("python", "", body))
        elif lang == "sh" and "run" in tags:
            out.append(("sh", "", body))
        elif any(t.startswith("file=") for t in tags):
            out.append(("file", next(t[5:] for t in tags if t.startswith("file=")), body))
    return out


RUNNER = r"""
import contextlib, io, json, shlex, subprocess, sys
from spark_dp.runtime import get_spark
from spark_dp.cli.main import main
get_spark("spark-dp-page", master="local[2]", conf={"spark.sql.shuffle.partitions": "2"})
results = []
for kind, arg, body in json.loads(sys.argv[1]):
    if kind == "file":
        open(arg, "w").write(body)
        continue
    if kind == "python":
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(body, "<page block>", "exec"), {"__name__": "__main__"})
        results.append({"block": body[:60], "rc": 0, "out": out.getvalue()})
        continue
    for line in [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]:
        argv = shlex.split(line)
        if argv[0] == "spark-dp":
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv[1:])
            results.append({"block": line, "rc": rc, "out": out.getvalue(), "err": err.getvalue()[-3000:]})
        else:
            done = subprocess.run(line, shell=True, capture_output=True, text=True)
            results.append({"block": line, "rc": done.returncode, "out": done.stdout, "err": done.stderr[-3000:]})
print("RESULTS" + json.dumps(results))
"""


def test_the_page_has_the_steps_a_user_needs():
    kinds = [(k, a) for k, a, _ in blocks(open(PAGE).read())]
    assert kinds[0] == ("python", "") and ("file", "customers.yaml") in kinds
    text = open(PAGE).read()
    for step in ("--dry-run", "spark-dp release customers.yaml", "spark-dp report", "rel.interval(", "privacy_unit",
                 "bounds"):
        assert step in text, step


def test_the_page_runs_as_written(tmp_path):
    page = blocks(open(PAGE).read())
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(page)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900, env=env)
    assert "RESULTS" in done.stdout, done.stderr[-3000:]
    results = json.loads(done.stdout[done.stdout.index("RESULTS") + len("RESULTS"):])
    failed = [r for r in results if r["rc"] != 0]
    assert not failed, failed
    by = {r["block"]: r for r in results}
    dry = by["spark-dp release --dry-run --n 20000 customers.yaml"]["out"]
    assert "Cost: ε 1, δ 1e-06." in dry and "best case" in dry and all(t in dry for t in ("age", "income", "tenure"))
    # the page's words: conservative from about 427x the best case, which this table (about 140x) is not
    assert "Intervals: coefficients and intercept: kind interval" in dry and "about x427 or more" in dry
    first, again = (json.loads(r["out"]) for r in results if r["block"] == "spark-dp release customers.yaml")
    assert first["reused"] is False and again["reused"] is True
    assert again["dataset_epsilon_spent"] == first["dataset_epsilon_spent"]  # the re-run spent nothing
    assert os.path.isfile(tmp_path / "releases" / "customers-spend-001.report.md")
    printed = next(r["out"] for r in results if r["block"].startswith("import spark_dp"))
    rows = {m[0]: (float(m[1]), float(m[2])) for m in
            re.findall(r"^\s*(\w+): +\S+ +\[\s*(\S+),\s*(\S+)\]$", printed, flags=re.M)}
    assert sorted(rows) == ["age", "income", "tenure"] and all(lo < hi for lo, hi in rows.values())
    ledger = by["spark-dp ledger --uri sqlite:///releases/ledger.db --dataset shop.customers"]["out"]
    row = next(ln.split() for ln in ledger.splitlines() if ln.startswith("shop.customers"))
    assert row[1] == "1"  # one release charged, after the re-run too
