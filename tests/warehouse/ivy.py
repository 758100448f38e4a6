"""Spark's Ivy settings for the warehouse tests: which Maven repository, which cache (see ivysettings.xml)."""

from __future__ import annotations

import os

MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
DEFAULT_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "spark-dp", "ivy")


def submit_args(workdir: str, *, ivy: str = DEFAULT_CACHE, maven: str = MAVEN_CENTRAL, conf: dict | None = None) -> str:
    """``PYSPARK_SUBMIT_ARGS`` pointing Spark's Ivy at ``maven`` with its cache in ``ivy`` (settings in ``workdir``).

    ``conf``: more ``--conf`` settings for the new session (what a user puts in ``spark-defaults.conf``).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "ivysettings.xml")) as fh:
        text = fh.read().replace("@IVY@", ivy).replace("@MAVEN@", maven)
    os.makedirs(workdir, exist_ok=True)
    settings = os.path.join(workdir, "ivysettings.xml")
    with open(settings, "w") as fh:
        fh.write(text)
    more = "".join(f"--conf {key}={value} " for key, value in (conf or {}).items())
    return f"{more}--conf spark.jars.ivySettings={settings} --conf spark.jars.ivy={ivy} pyspark-shell"
