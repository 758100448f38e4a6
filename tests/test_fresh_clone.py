"""Every config in conf/ and conf/examples/ runs as it is from a fresh clone (README, "What it releases").

A copy of the repository's tracked files (``git ls-files``: nothing an earlier run or a developer's
machine left behind, no data outside the repository) in a temporary directory; the example data
generated as documented (``python -m spark_dp.cli.example_data``); then ``spark-dp release CONFIG``
from that directory for every job config, unchanged (secure sampler, its own ledger and output
paths), in this process on the suite's one SparkSession. The release plan (catalog tables, not
files) is checked with ``spark-dp plan run --dry-run`` and ``plan status``, which read no data.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from spark_dp.cli.main import main as cli_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # an unpacked sdist: say so (not a silent skip)
        pytest.skip(f"not a git checkout ({exc}): the fresh-clone layout is made from `git ls-files`")
    return [p for p in out.decode().split("\0") if p]


CONFIGS = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "conf", "*.yaml"))
                 + glob.glob(os.path.join(ROOT, "conf", "examples", "*.yaml")))
JOBS = [c for c in CONFIGS if not os.path.basename(c).startswith("plan_")]
PLANS = [c for c in CONFIGS if os.path.basename(c).startswith("plan_")]


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """The tracked files copied to a temp dir, the example data written there by the documented command."""
    root = tmp_path_factory.mktemp("fresh-clone")
    for rel in _tracked():
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(root, rel))
    assert not (root / "data").exists() and not (root / "releases").exists()  # nothing generated is tracked
    done = subprocess.run([sys.executable, "-m", "spark_dp.cli.example_data"], cwd=root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return root


def test_the_clone_has_every_config_and_nothing_reads_outside_it(clone):
    assert sorted(os.path.relpath(p, clone) for p in glob.glob(str(clone / "conf" / "**" / "*.yaml"),
                                                               recursive=True)) == CONFIGS
    for rel in CONFIGS:
        text = (clone / rel).read_text()
        assert "../" not in text and "/work/" not in text, rel  # a path outside the repository


@pytest.mark.parametrize("config", JOBS)
def test_every_job_config_runs_as_it_is(spark, clone, monkeypatch, capsys, config):
    monkeypatch.chdir(clone)
    assert cli_main(["release", config]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    path = json.loads(out[out.index("{"):])["path"]  # the release job prints its summary as JSON
    assert os.path.isfile(os.path.join(path, "manifest.json")), out


@pytest.mark.parametrize("config", PLANS)
def test_the_release_plan_dry_runs_and_reports_its_status(spark, clone, monkeypatch, capsys, config):
    monkeypatch.chdir(clone)
    assert cli_main(["plan", "run", config, "--date", "2026-11-30", "--dry-run"]) == 0, capsys.readouterr().err
    assert cli_main(["plan", "status", config]) == 0, capsys.readouterr().err
