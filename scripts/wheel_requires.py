"""Prints a wheel's runtime requirements (its METADATA's Requires-Dist without extras), one a line.

    python scripts/wheel_requires.py WHEEL [--without NAME ...]

scripts/dist.sh installs them (without pyspark) into the packed environment;
it and scripts/matrix_env.sh key their cached virtualenvs on them, so a venv is
rebuilt when the dependencies change, not on every edit of pyproject.toml.
"""

import argparse
import email
import re
import zipfile

ap = argparse.ArgumentParser()
ap.add_argument("wheel")
ap.add_argument("--without", action="append", default=[], help="leave out this distribution")
args = ap.parse_args()
with zipfile.ZipFile(args.wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for req in email.message_from_bytes(z.read(meta)).get_all("Requires-Dist") or []:
        name = re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0].lower()
        if "extra ==" not in req and name not in {w.lower() for w in args.without}:
            print(req)
