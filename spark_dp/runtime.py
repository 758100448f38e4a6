"""Getting a SparkSession the way the user runs spark-dp.

Order: the active session (notebooks, Databricks, spark-submit after the
user built one) → ``SPARK_REMOTE`` (Spark Connect) → a session from the
spark-submit launcher's conf → a local session sized for this machine.
Library code never touches ``SparkContext`` or the RDD API.

Table formats (:func:`table_format_conf`): a job that reads or writes Delta
Lake or Apache Iceberg tables needs their jars on the classpath when the JVM
starts. When spark-dp creates the local session itself, it adds the Maven
coordinates of the build matching the installed Spark line to
``spark.jars.packages`` (Spark's own Ivy resolution fetches them once into
``~/.ivy2``, or where ``spark.jars.ivy`` says) with the SQL extension and,
for Delta, the ``spark_catalog`` implementation. A session that exists
already (a notebook, Databricks, spark-submit, Spark Connect) is used as it
is: its owner configured its jars.

:func:`check_workers` runs once per session, before a release's first Spark
job: a one-row Python UDF (pickled by value, so it runs even where spark-dp
is missing) reports which Python the workers run and whether it imports
spark-dp, numpy, pyarrow and pandas; if not, the release stops with one line
saying how to fix it (:class:`~spark_dp.errors.WorkerEnvironmentError`),
before anything is charged.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import json
import logging
import os
import re
import sys
import weakref
from collections.abc import Iterator

from pyspark.sql import SparkSession

from spark_dp.errors import ConfigError, WorkerEnvironmentError

log = logging.getLogger("spark_dp")

LOCAL_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
}


# The table formats whose jars spark-dp arranges, per Spark line (major.minor): the Maven coordinates of
# the build made for that line (Delta Lake 3.3 for Spark 3.5; from Delta 4.1 on, one artifact per Spark
# minor, `delta-spark_<spark minor>_2.13`; Iceberg's runtime is per Spark minor as well). A line missing
# here has no release of that format yet: the error says so instead of loading a build for another line.
TABLE_FORMAT_PACKAGES: dict[str, dict[str, str]] = {
    "delta": {
        "3.5": "io.delta:delta-spark_2.12:3.3.3",  # 3.3.3: REPLACE TABLE AS SELECT fails with 3.3.2 on Spark >= 3.5.6
        "4.0": "io.delta:delta-spark_4.0_2.13:4.4.0",
        "4.1": "io.delta:delta-spark_4.1_2.13:4.4.0",
        "4.2": "io.delta:delta-spark_4.2_2.13:4.4.0",
    },
    "iceberg": {
        "3.5": "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1",
        "4.0": "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.1",
        "4.1": "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0",
    },
}
_EXTENSIONS = {"delta": "io.delta.sql.DeltaSparkSessionExtension",
               "iceberg": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"}
_NAMES = {"delta": "Delta Lake", "iceberg": "Apache Iceberg"}


_NEEDED_FORMATS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("spark_dp_formats", default=())


@contextlib.contextmanager
def formats_needed(formats) -> Iterator[None]:
    """While the block runs, a session :func:`get_spark` creates also gets ``formats``' jars.

    A plan runs several jobs in one session, created by the first that needs
    Spark: it must carry the jars of every format the plan's jobs use.
    """
    token = _NEEDED_FORMATS.set(tuple(sorted(set(_NEEDED_FORMATS.get()) | set(formats))))
    try:
        yield
    finally:
        _NEEDED_FORMATS.reset(token)


def spark_line(version: str | None = None) -> str:
    """The installed (or given) Spark version's ``major.minor``, e.g. ``"3.5"``."""
    if version is None:
        import pyspark

        version = pyspark.__version__
    return ".".join(version.split(".")[:2])


def table_format_conf(formats, *, spark_version: str | None = None) -> dict[str, str]:
    """The Spark settings a new session needs for the table ``formats`` (``delta``, ``iceberg``).

    ``spark.jars.packages`` (the coordinates in :data:`TABLE_FORMAT_PACKAGES`
    for this Spark line), ``spark.sql.extensions`` and, for Delta, the
    ``spark_catalog`` implementation. Formats other than these two need
    nothing (``{}``).

    Raises:
        ConfigError: formats with no release for this Spark line: one error naming them, the lines that have
            builds and the pyspark to install (the newest line with a build of every format asked for).
    """
    line = spark_line(spark_version)
    wanted = sorted({f for f in formats if f in TABLE_FORMAT_PACKAGES})
    missing = [f for f in wanted if line not in TABLE_FORMAT_PACKAGES[f]]
    if missing:
        raise ConfigError(_no_build_message(wanted, missing, line))
    packages, extensions, conf = [], [], {}
    for fmt in wanted:
        builds = TABLE_FORMAT_PACKAGES[fmt]
        packages.append(builds[line])
        extensions.append(_EXTENSIONS[fmt])
        if fmt == "delta":
            conf["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    if packages:
        conf["spark.jars.packages"] = ",".join(packages)
        conf["spark.sql.extensions"] = ",".join(extensions)
    return conf


def _line_key(line: str) -> tuple[int, ...]:
    return tuple(int(p) for p in line.split("."))


def _no_build_message(wanted: list[str], missing: list[str], line: str) -> str:
    """The one error for the ``missing`` formats (of ``wanted``) on Spark ``line``: which lines have builds, what to install.

    The pyspark suggested is the newest line with a build of every wanted
    format (a session carries them all); for Delta alone, also the
    ``spark-dp[delta]`` extra, whose delta-spark requirement picks such a pyspark.
    """
    def lines(fmt: str) -> str:
        return ", ".join(sorted(TABLE_FORMAT_PACKAGES[fmt], key=_line_key))

    if len(missing) == 1:
        fmt = missing[0]
        head = (f"The format {fmt!r} needs {_NAMES[fmt]} for Spark {line}, which has no release for that Spark line "
                f"yet (it has builds for Spark {lines(fmt)})")
    else:
        head = (f"The formats {' and '.join(map(repr, missing))} have no release for Spark {line} yet ("
                + "; ".join(f"{_NAMES[f]} has builds for Spark {lines(f)}" for f in missing) + ")")
    common = set.intersection(*(set(TABLE_FORMAT_PACKAGES[f]) for f in wanted))
    if not common:
        return (f"{head}, and no Spark line has builds of all of {', '.join(map(repr, wanted))}: use them in "
                "separate jobs, or run where the runtime ships them (e.g. Databricks).")
    pin = f"pip install 'pyspark=={max(common, key=_line_key)}.*'"
    if len(wanted) == 1:
        extra = ", or pip install 'spark-dp[delta]', which picks a pyspark with a Delta build" if wanted == ["delta"] else ""
        how = f"install one of those ({pin}{extra})"
    else:
        how = f"install a pyspark of a line with builds of {' and '.join(map(repr, wanted))} ({pin})"
    return f"{head}: {how}, or run where the runtime ships {'it' if len(wanted) == 1 else 'them'} (e.g. Databricks)."


# Iceberg's own time-travel read options. The Iceberg runtime for Spark 4.1 on refuses them ("no longer
# supported, use Spark built-in versionAsOf"): there the same read goes through Spark's versionAsOf (the
# snapshot id) and timestampAsOf.
_ICEBERG_OPTIONS_UNTIL = (4, 1)


def iceberg_time_travel_options(options: dict | None, spark_version: str | None = None) -> dict:
    """``options`` with Iceberg's ``snapshot-id`` / ``as-of-timestamp`` in the form this Spark line's Iceberg reads.

    Up to Spark 4.0: unchanged. From Spark 4.1: ``snapshot-id`` becomes
    ``versionAsOf`` (the snapshot id) and ``as-of-timestamp`` (milliseconds
    since the epoch) ``timestampAsOf`` (that instant, written in UTC with its
    zone, so the session time zone does not move it). Other options (Delta's
    ``versionAsOf``, a ``where``) pass unchanged. ``spark_version``: the
    session's Spark (``spark.version``; default: the installed pyspark).
    """
    options = dict(options or {})
    line = tuple(int(p) for p in spark_line(spark_version).split("."))
    if line < _ICEBERG_OPTIONS_UNTIL:
        return options
    if "snapshot-id" in options:
        options["versionAsOf"] = str(options.pop("snapshot-id"))
    if "as-of-timestamp" in options:
        from datetime import UTC, datetime

        at = datetime.fromtimestamp(int(options.pop("as-of-timestamp")) / 1000, tz=UTC)
        options["timestampAsOf"] = at.strftime("%Y-%m-%d %H:%M:%S.%fZ")
    return options


def _merged(conf: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    """``conf`` with ``extra`` added; list-valued settings (packages, extensions) are joined, not replaced."""
    out = dict(conf)
    for key, value in extra.items():
        if key in ("spark.jars.packages", "spark.sql.extensions") and out.get(key):
            have = out[key].split(",")
            out[key] = ",".join(have + [v for v in value.split(",") if v not in have])
        else:
            out.setdefault(key, value)
    return out


def get_spark(app_name: str = "spark-dp", *, master: str | None = None, conf: dict[str, str] | None = None,
              formats=()) -> SparkSession:
    """The SparkSession to use.

    Args:
        app_name: application name for a new session.
        master: master URL for a new classic session; defaults to
            ``SPARK_DP_MASTER`` or ``local[N]`` with N = this machine's cores.
        conf: extra settings for a new session.
        formats: table formats the session must read or write (``delta``,
            ``iceberg``): a new local session gets their jars and settings
            (:func:`table_format_conf`). An existing session, Spark Connect
            and spark-submit keep their own configuration.

    Raises:
        ConfigError: a format has no build for this Spark line, or its jars
            could not be fetched (no access to Maven Central or the
            configured repository): one message naming what to install.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        log.info("connecting to Spark Connect at %s", remote)
        builder = SparkSession.builder.remote(remote)
        return builder.getOrCreate()
    builder = SparkSession.builder.appName(app_name)
    launched_by_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    formats = tuple(sorted(set(formats) | set(_NEEDED_FORMATS.get())))
    extra = {} if launched_by_submit else table_format_conf(formats)
    conf = _merged(dict(conf or {}), extra)
    if not launched_by_submit:
        # Local workers must run the driver's interpreter (its numpy/pyarrow).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master or os.environ.get("SPARK_DP_MASTER") or f"local[{os.cpu_count() or 2}]")
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
        conf = {**conf, **_quiet_logging_conf(conf)}  # no start-up log lines unless the user chose Spark's logging
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        if not extra:
            raise
        # the JVM did not start: Ivy could not resolve the packages (its report is on stderr)
        wanted = ", ".join(sorted(f for f in formats if f in TABLE_FORMAT_PACKAGES))
        raise ConfigError(
            f"Spark could not start with the jars for format {wanted} ({extra['spark.jars.packages']}): most likely "
            "they could not be fetched from Maven Central or the repository in spark.jars.ivySettings (Spark's "
            "report is above). Run once where Maven Central is reachable (the jars are then cached in ~/.ivy2), "
            "or download those jars and give them with spark.jars; nothing was charged. "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})") from None
    if not launched_by_submit:
        # Stop the local session this call started before the interpreter exits: a JVM left to its shutdown
        # hooks while Python tears down races the block manager's cleanup ("Failed to delete: /tmp/blockmgr-…").
        atexit.register(_stop_quietly, session)
    return session


def _stop_quietly(session: SparkSession) -> None:
    """At exit: stop the session spark-dp started, saying nothing (the script is leaving).

    By then Python has joined every non-daemon thread; a daemon thread still
    inside a Spark call (a job running, or one being submitted) wakes with
    that call's error when the session stops — a cancelled job, "SparkContext
    has been shutdown" — and Python would print it with its Java trace just
    before ending the thread anyway. Those errors are dropped
    (:func:`_quiet_daemon_threads`); a non-daemon thread's are not (there
    are none left), nor anything before the exit.

    Only ``stop``, which cancels running jobs itself. ``interruptAll`` first
    (classic sessions from Spark 4.0) was tried and measured on pyspark 4.3
    with a script leaving mid-job: it exits about 0.5–1 s sooner, but the
    tasks it kills while the context is still up are logged ("WARN
    TaskSetManager: Lost task … TaskKilled … cancelled as part of
    cancellation of all jobs", one line per task), where ``stop`` alone
    prints nothing (tests/test_exit_quiet.py runs such a script).
    """
    _quiet_daemon_threads()
    try:
        session.stop()
    except Exception:  # noqa: BLE001 - at exit: a JVM already gone is fine
        pass


def _quiet_daemon_threads() -> None:
    """From now on (the interpreter is exiting), an exception ending a daemon thread prints nothing."""
    import threading

    previous = threading.excepthook

    def hook(args) -> None:
        if args.thread is not None and args.thread.daemon:
            return
        previous(args)

    threading.excepthook = hook


# Spark's console logging for the local sessions spark-dp starts, when the user configured none: Spark's own
# defaults (log4j2-defaults.properties) at WARN, as the pyspark shell has them, with the start-up lines that
# say nothing to a spark-dp user left out — NativeCodeLoader's "Unable to load native-hadoop library" and the
# banners Spark prints when it falls back to its defaults ("Using Spark's default log4j profile", "Setting
# default log level"). Warnings and errors of Spark's own still print, on stderr.
LOG4J2_PROPERTIES = """\
# written by spark-dp (spark_dp.runtime.LOG4J2_PROPERTIES) for the local Spark sessions it starts
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
logger.jetty2.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty2.level = error
logger.metastore.name = org.apache.hadoop.hive.metastore.RetryingHMSHandler
logger.metastore.level = fatal
logger.metastore2.name = org.apache.hadoop.hive.metastore.ObjectStore
logger.metastore2.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
logger.parquet2.name = parquet.CorruptStatistics
logger.parquet2.level = error
"""
_LOG4J_OPTION = "-Dlog4j2.configurationFile="


def _user_configured_logging(conf: dict[str, str]) -> bool:
    """Whether the user chose Spark's logging: a log4j option in the driver's Java options (the given conf or
    ``JAVA_TOOL_OPTIONS``), or a ``log4j2.properties`` in the Spark conf directory (``SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``) that Spark would load.
    """
    options = " ".join([conf.get("spark.driver.extraJavaOptions", ""), conf.get("spark.driver.defaultJavaOptions", ""),
                        os.environ.get("JAVA_TOOL_OPTIONS", ""), os.environ.get("SPARK_SUBMIT_OPTS", "")])
    if "log4j" in options:
        return True
    conf_dir = os.environ.get("SPARK_CONF_DIR") or (
        os.path.join(os.environ["SPARK_HOME"], "conf") if os.environ.get("SPARK_HOME") else None)
    return bool(conf_dir) and any(os.path.exists(os.path.join(conf_dir, name))
                                  for name in ("log4j2.properties", "log4j2.xml", "log4j2.yaml", "log4j2.json"))


def _quiet_logging_conf(conf: dict[str, str]) -> dict[str, str]:
    """``spark.driver.extraJavaOptions`` pointing the new local JVM at :data:`LOG4J2_PROPERTIES` (the user's
    other Java options kept), or ``{}`` where the user configured logging (:func:`_user_configured_logging`).
    """
    if _user_configured_logging(conf):
        return {}
    import hashlib
    import tempfile

    digest = hashlib.sha256(LOG4J2_PROPERTIES.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"spark-dp-log4j2-{digest}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(LOG4J2_PROPERTIES)
        os.replace(tmp, path)  # atomic: concurrent sessions see the whole file or none
    option = f"{_LOG4J_OPTION}file:{path}"
    have = conf.get("spark.driver.extraJavaOptions", "").strip()
    return {"spark.driver.extraJavaOptions": f"{have} {option}".strip()}


# The probe's source, compiled into a module that does not exist on the workers, so cloudpickle ships the
# function by value: it runs in a worker that cannot import spark_dp, and reports what that worker has.
_PROBE_SOURCE = """
def probe(_):
    import importlib, json, sys
    missing, version = [], None
    for name in ("numpy", "pyarrow", "pandas", "spark_dp"):
        try:
            module = importlib.import_module(name)
        except Exception:
            missing.append(name)
        else:
            version = getattr(module, "__version__", None) if name == "spark_dp" else version
    return json.dumps({"python": sys.executable, "version": "%d.%d.%d" % tuple(sys.version_info[:3]),
                       "missing": missing, "spark_dp": version})
"""
_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # sessions whose workers passed
_CANNOT_RUN = re.compile(r'Cannot run program "([^"]*)"')
_VERSION_MISMATCH = re.compile(r"Python in worker has different version:? \(?([0-9., ]+)\)? than that in driver:? "
                               r"\(?([0-9., ]+)\)?")


def _probe_udf():
    from pyspark.sql import functions as F

    namespace: dict = {"__name__": "spark_dp_worker_probe"}
    exec(compile(_PROBE_SOURCE, "<spark-dp worker probe>", "exec"), namespace)  # noqa: S102 - our own constant
    return F.udf(namespace["probe"], "string", useArrow=False)


def _master(spark: SparkSession) -> str | None:
    try:
        return spark.conf.get("spark.master", None)
    except Exception:  # noqa: BLE001 - e.g. a Connect server that hides it
        return None


def _fix(spark: SparkSession) -> str:
    """How to make the workers run a Python with spark-dp, for this session's master."""
    master = _master(spark) or ""
    exe = sys.executable
    if master.startswith("local"):
        env = os.environ.get("PYSPARK_PYTHON")
        if env and env != exe:
            how = f"PYSPARK_PYTHON is {env!r}: set it to this interpreter ({exe})"
        else:
            how = (f"set PYSPARK_PYTHON={exe}, or import spark_dp before creating the session (it sets that), or "
                   "get the session with spark_dp.runtime.get_spark()")
        return (f"local workers run the PYSPARK_PYTHON of when the session started: {how}; then stop the session "
                "(spark.stop()) and create it again")
    return ("install spark-dp with its dependencies for the workers' Python (README, 'Running on a cluster': "
            "spark-submit --archives dist/spark-dp-env.tar.gz#environment with "
            "spark.pyspark.python=./environment/bin/python), or point PYSPARK_PYTHON / spark.pyspark.python at "
            "a Python that has it")


def check_workers(spark: SparkSession | None) -> None:
    """Checks, once per session, that its Python workers can run spark-dp; WorkerEnvironmentError (one line) if not.

    One Spark job of one row, run before the first release's Spark work (and
    before its charge). A probe that fails for a reason it does not recognise
    is logged and skipped: the release then runs (and fails) as it would have.
    """
    if spark is None:
        return
    try:
        if spark in _CHECKED:
            return
    except TypeError:  # not weak-referenceable: check every time (one tiny job)
        pass
    try:
        text = spark.range(1, numPartitions=1).select(_probe_udf()("id").alias("probe")).collect()[0]["probe"]
    except Exception as exc:  # noqa: BLE001 - read what the failure says about the workers
        msg = str(exc)
        if (m := _CANNOT_RUN.search(msg)) is not None:
            raise WorkerEnvironmentError(
                f"The Spark session's Python workers cannot start: Spark cannot run {m.group(1)!r} "
                f"(PYSPARK_PYTHON / spark.pyspark.python); {_fix(spark)}.") from None
        if (m := _VERSION_MISMATCH.search(msg)) is not None:
            raise WorkerEnvironmentError(
                f"The Spark session's Python workers run Python {m.group(1).strip()}, this driver "
                f"{m.group(2).strip()}; {_fix(spark)}.") from None
        log.warning("could not check the Spark workers' Python (%s); going on", type(exc).__name__)
        return
    found = json.loads(text)
    if found["missing"]:
        raise WorkerEnvironmentError(
            f"The Python workers of this Spark session cannot import {', '.join(found['missing'])}: they run "
            f"{found['python'] or 'an unknown Python'} (Python {found['version']}), this driver runs {sys.executable}; "
            f"{_fix(spark)}.")
    from spark_dp._version import __version__

    if found["spark_dp"] != __version__:
        log.warning("the Spark workers run spark-dp %s, this driver %s: install the same version on both",
                    found["spark_dp"], __version__)
    try:
        _CHECKED[spark] = True
    except TypeError:
        pass
