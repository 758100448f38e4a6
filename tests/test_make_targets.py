"""`make demo` installs what the demo needs; `make test` the rest (scripts/bootstrap.sh, the Makefile).

The bootstrap script runs for real, with stand-ins on its PATH for the
programs whose effects we watch: a Python that records what pip is asked to
install, an ``apt-get`` that records being called, an ``ls`` that finds no
PostgreSQL and an ``id`` that says root (the case where the script would
install PostgreSQL). No network, no virtualenv: well under a second.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FAKE_PYTHON = """#!/bin/bash
echo "python $*" >> "$BOOT_LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi
exit 0
"""


def _bootstrap(tmp_path: Path, extras: str) -> list[str]:
    """Runs scripts/bootstrap.sh with the stand-ins; the recorded calls, one line each."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("java", "sed", "head", "mkdir", "cp"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    stand_ins = {"python": FAKE_PYTHON,
                 "apt-get": '#!/bin/bash\necho "apt-get $*" >> "$BOOT_LOG"\n',
                 "ls": "#!/bin/bash\nexit 2\n",  # no PostgreSQL under /usr/lib/postgresql
                 "id": "#!/bin/bash\necho 0\n"}  # root: the script may use apt-get
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": str(bin_dir), "BOOT_LOG": str(log), "HOME": str(tmp_path)}
    run = subprocess.run([shutil.which("bash"), "scripts/bootstrap.sh", str(bin_dir / "python"),
                          str(tmp_path / "venv"), extras], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    return log.read_text().splitlines()


def _installs(calls: list[str]) -> list[str]:
    return [c.rsplit(" ", 1)[-1] for c in calls if c.startswith("python -m pip install --quiet -e ")]


def test_the_demo_installs_spark_dp_and_matplotlib_only(tmp_path):
    calls = _bootstrap(tmp_path, "plots")
    assert _installs(calls) == [".[plots]"], calls
    assert not [c for c in calls if c.startswith("apt-get")], "make demo must not install PostgreSQL"


def test_the_tests_install_their_extras_and_postgresql(tmp_path):
    calls = _bootstrap(tmp_path, "test,connect,plots")
    assert _installs(calls) == [".[test,connect,plots]"], calls
    assert any(c.startswith("apt-get install") and "postgresql" in c for c in calls), calls


@pytest.mark.parametrize("target, extras", [("demo", "plots"), ("test", "test,connect,plots")])
def test_each_make_target_bootstraps_with_its_extras(tmp_path, target, extras):
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    plan = subprocess.run([make, "-n", target, f"VENV={tmp_path / 'venv'}"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    boots = [line for line in plan.stdout.splitlines() if "scripts/bootstrap.sh" in line]
    assert boots and all(line.split()[-1] == extras for line in boots), plan.stdout
