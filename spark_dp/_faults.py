"""Fault-injection points for the crash tests (issue: reliability).

``SPARK_DP_FAULT=<point>`` makes the process kill itself with SIGKILL when it
reaches ``<point>``: a real ``kill -9``, with no cleanup. Points:
``after_check``, ``after_charge``, ``during_write``. Unset in production,
where :func:`fault_point` is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal


def fault_point(name: str) -> None:
    if os.environ.get("SPARK_DP_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
