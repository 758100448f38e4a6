"""Where releases are stored: local directories, and object stores through ``pyarrow.fs``.

A release location is a string: a local path (or ``file:`` URI), or a URI of
a store that :mod:`pyarrow.fs` opens:

============== ========================================= ====================================================
scheme         file system                               credentials and endpoint (never from a config file)
============== ========================================= ====================================================
``s3://``      ``pyarrow.fs.S3FileSystem``                the AWS credential chain (environment, ``~/.aws``,
(``s3a://``,                                             instance/role metadata); the endpoint from
``s3n://``)                                              ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``
``gs://``      ``pyarrow.fs.GcsFileSystem``               Google application-default credentials; an emulator
                                                         from ``CLOUD_STORAGE_EMULATOR_ENDPOINT`` or
                                                         ``STORAGE_EMULATOR_HOST``, anonymously
``abfs://``,   ``pyarrow.fs.AzureFileSystem``             ``AZURE_STORAGE_CONNECTION_STRING`` when it names the
``abfss://``                                             URI's account (its key or SAS token, its endpoints);
                                                         else the Azure default credential chain
                                                         (environment, workload/managed identity, CLI login)
``hdfs://``    ``pyarrow.fs.HadoopFileSystem`` (libhdfs); the Hadoop configuration (``HADOOP_CONF_DIR``,
               where libhdfs cannot be loaded,            Kerberos ticket cache)
               ``hdfs-native`` (``spark-dp[hdfs]``)
               behind ``pyarrow.fs.PyFileSystem``
============== ========================================= ====================================================

pyarrow's ``S3FileSystem`` does not read ``AWS_ENDPOINT_URL`` itself (apache/arrow#49643),
so this module passes it (``AWS_ENDPOINT_URL_S3`` first, as the AWS SDKs do) as the
endpoint override; ``s3a://`` and ``s3n://`` (Hadoop's names for S3) are opened as ``s3://``.
pyarrow's ``GcsFileSystem`` uses default credentials even against an emulator (google-cloud-cpp
honours ``CLOUD_STORAGE_EMULATOR_ENDPOINT`` for the endpoint only), so an emulator variable
opens the emulator anonymously, at that address, as Google's own client libraries do.
pyarrow's ``abfs[s]://`` URI parsing takes no key and reads no Azure environment variable,
so the Azure SDKs' standard connection string is read here.
pyarrow's ``HadoopFileSystem`` needs ``libhdfs.so`` and a Hadoop installation (``HADOOP_HOME``,
``CLASSPATH``), which a pip-installed Spark does not have; where it cannot be loaded, ``hdfs://``
is opened with ``hdfs-native`` (a pure HDFS client on PyPI, the ``spark-dp[hdfs]`` extra) through
``pyarrow.fs.PyFileSystem(FSSpecHandler(...))``: the same operations, HDFS's own rename included.
No other scheme needs fsspec: pyarrow has a native file system for each.

Only :mod:`spark_dp.release` writes releases; the readers (``load_release``,
``estimate``, ``report``, merging, plans, ``audit``) go through the helpers here,
so every one of them accepts the same locations.
"""

from __future__ import annotations

import os
import posixpath
import socket
import threading
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from spark_dp.errors import ConfigError
from spark_dp.params import is_local_path

_S3_ALIASES = ("s3a", "s3n")
_cache: dict[tuple, pafs.FileSystem] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Location:
    """A location opened: the file system, the path inside it, and whether it is the driver's own disk."""

    fs: pafs.FileSystem
    path: str
    local: bool

    def child(self, *names: str) -> Location:
        join = os.path.join if self.local else posixpath.join
        return Location(self.fs, join(self.path, *names), self.local)


def is_local(location: str) -> bool:
    """Whether ``location`` is on the driver's file system (a path or ``file:`` URI)."""
    return is_local_path(location)


def _local_path(location: str) -> str:
    return unquote(urlparse(location).path) if location.startswith("file:") else location


def _s3(netloc: str) -> pafs.FileSystem:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    if endpoint is None and region is None:
        # On AWS proper, the bucket's own region (what FileSystem.from_uri does for s3:// URIs).
        region = pafs.resolve_s3_region(netloc)
    return pafs.S3FileSystem(endpoint_override=endpoint, region=region)


# google-cloud-cpp (under pyarrow) sends every request to CLOUD_STORAGE_EMULATOR_ENDPOINT when it is
# set, whatever endpoint it is given: so that variable comes first.
_GCS_EMULATOR = ("CLOUD_STORAGE_EMULATOR_ENDPOINT", "STORAGE_EMULATOR_HOST")
_AZURE_CONNECTION = "AZURE_STORAGE_CONNECTION_STRING"


def _gcs() -> pafs.FileSystem:
    emulator = next((os.environ[k] for k in _GCS_EMULATOR if os.environ.get(k)), None)
    if emulator is None:
        return pafs.GcsFileSystem()  # application-default credentials, Google's endpoint
    u = urlparse(emulator if "://" in emulator else f"http://{emulator}")  # "host:port" (Go) or a URL (Python)
    return pafs.GcsFileSystem(anonymous=True, scheme=u.scheme, endpoint_override=u.netloc)


def _connection_string() -> dict[str, str]:
    """``AZURE_STORAGE_CONNECTION_STRING`` as {lower-case key: value} ({} when unset)."""
    parts = {}
    for item in os.environ.get(_AZURE_CONNECTION, "").split(";"):
        key, sep, value = item.partition("=")
        if sep:
            parts[key.strip().lower()] = value.strip()
    return parts


def _azure_endpoint(url: str, account: str) -> tuple[str, str]:
    """(scheme, authority) of a connection string's endpoint URL, in pyarrow's form.

    pyarrow builds ``scheme://<account><authority>/`` from an authority that
    starts with a dot, else ``scheme://<authority>/<account>/`` (emulators).
    """
    u = urlparse(url)
    host = u.netloc
    if u.path.strip("/") == account:  # path style: http://127.0.0.1:10000/devstoreaccount1
        return u.scheme, host
    if not u.path.strip("/") and host.lower().startswith(f"{account.lower()}."):
        return u.scheme, host[len(account):]  # https://<account>.blob.core.windows.net
    raise ConfigError(f"{_AZURE_CONNECTION}: endpoint {url!r} is neither https://{account}.<domain> nor "
                      f"<scheme>://<host>/{account}, the two forms pyarrow's AzureFileSystem addresses.")


def _azure(location: str, netloc: str) -> pafs.FileSystem:
    """The file system of ``abfs[s]://container@account.<domain>/...``."""
    account = netloc.partition("@")[2].split(".", 1)[0]
    conn = _connection_string()
    # a SAS connection string may name its account only in its endpoint's host
    named = conn.get("accountname") or urlparse(conn.get("blobendpoint", "")).netloc.split(".", 1)[0]
    if not account or named.lower() != account.lower():
        return pafs.FileSystem.from_uri(location)[0]  # the default credential chain, the URI's domain
    kwargs: dict[str, str] = {"account_name": account}
    if conn.get("accountkey"):
        kwargs["account_key"] = conn["accountkey"]
    elif conn.get("sharedaccesssignature"):
        kwargs["sas_token"] = conn["sharedaccesssignature"]
    suffix = conn.get("endpointsuffix", "core.windows.net")
    protocol = conn.get("defaultendpointsprotocol", "https")
    blob = (_azure_endpoint(conn["blobendpoint"], account) if conn.get("blobendpoint")
            else (protocol, f".blob.{suffix}"))
    if conn.get("dfsendpoint"):
        dfs = _azure_endpoint(conn["dfsendpoint"], account)
    else:  # an emulator serves both APIs on one address; Azure proper has a .dfs. twin of the .blob. host
        dfs = (blob[0], blob[1].replace(".blob.", ".dfs.", 1)) if blob[1].startswith(".") else blob
    kwargs.update(blob_storage_scheme=blob[0], blob_storage_authority=blob[1],
                  dfs_storage_scheme=dfs[0], dfs_storage_authority=dfs[1])
    return pafs.AzureFileSystem(**kwargs)


def _hdfs(location: str) -> pafs.FileSystem:
    """libhdfs (pyarrow's HadoopFileSystem) where it loads, else the pure client ``hdfs-native``.

    Raises:
        ConfigError: neither can be had (the message says what to install).
    """
    try:
        return pafs.FileSystem.from_uri(location)[0]
    except OSError as exc:  # no libhdfs / libjvm / Hadoop CLASSPATH on this host
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    try:
        from hdfs_native.fsspec import HdfsFileSystem
    except ImportError:
        raise ConfigError(f"Cannot open {location!r}: pyarrow's HadoopFileSystem needs libhdfs and a Hadoop "
                          f"installation ({why}); or install the pure HDFS client: pip install 'spark-dp[hdfs]' "
                          "(hdfs-native).") from None
    u = urlparse(location)
    return pafs.PyFileSystem(pafs.FSSpecHandler(HdfsFileSystem(host=u.hostname, port=u.port)))


def _env_key(scheme: str) -> tuple:
    """What the file system of ``scheme`` depends on besides the URI (a cache key part)."""
    names = {"s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                    "AWS_ACCESS_KEY_ID"),
             "gs": _GCS_EMULATOR, "abfs": (_AZURE_CONNECTION,),
             "hdfs": ("HADOOP_CONF_DIR", "HADOOP_HOME", "CLASSPATH", "ARROW_LIBHDFS_DIR")}.get(scheme, ())
    return tuple(os.environ.get(k) for k in names)


def _open(scheme: str, netloc: str, location: str) -> pafs.FileSystem:
    """The (cached) file system of ``scheme://netloc``, from the store's standard configuration now."""
    key = (scheme, netloc, _env_key(scheme))
    with _lock:
        fs = _cache.get(key)
        if fs is None:
            fs = _cache[key] = (_s3(netloc) if scheme == "s3" else _gcs() if scheme == "gs"
                                else _hdfs(location) if scheme == "hdfs" else _azure(location, netloc))
    return fs


def locate(location: str) -> Location:
    """Opens ``location`` (path or URI): its file system and the path inside it.

    Raises:
        ConfigError: a URI whose scheme pyarrow cannot open (the message names it).
    """
    if is_local(location):
        return Location(pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(_local_path(location))), True)
    u = urlparse(location)
    scheme = u.scheme.lower()
    scheme = {**dict.fromkeys(_S3_ALIASES, "s3"), "abfss": "abfs"}.get(scheme, scheme)
    try:
        if scheme in ("s3", "gs"):  # bucket/key
            return Location(_open(scheme, u.netloc, location), f"{u.netloc}{unquote(u.path)}".rstrip("/"), False)
        if scheme == "abfs" and "@" in u.netloc:  # container@account.<domain>/path: container/path
            return Location(_open(scheme, u.netloc, location),
                            f"{u.netloc.partition('@')[0]}{unquote(u.path)}".rstrip("/"), False)
        if scheme == "hdfs":  # hdfs://namenode[:port]/path: /path
            return Location(_open(scheme, u.netloc, location), unquote(u.path).rstrip("/") or "/", False)
        fs, path = pafs.FileSystem.from_uri(location)
    except ConfigError:
        raise
    except (ValueError, OSError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise ConfigError(f"Cannot open {location!r} through pyarrow.fs ({exc}); release locations are local "
                          "paths or s3://, gs://, abfs(s)://, hdfs:// URIs.") from exc
    return Location(fs, path.rstrip("/"), False)


def join(location: str, *names: str) -> str:
    """``location``/``names`` in the location's own syntax (``os.path`` locally, ``/`` in URIs)."""
    if is_local(location):
        return os.path.join(location, *names)
    return posixpath.join(location.rstrip("/"), *names)


def basename(location: str) -> str:
    """The last component of a path or URI."""
    return os.path.basename(location) if is_local(location) else posixpath.basename(location.rstrip("/"))


def _type(loc: Location) -> pafs.FileType:
    return loc.fs.get_file_info(loc.path).type


def is_file(location: str | Location) -> bool:
    """Whether ``location`` is an existing file (object)."""
    loc = location if isinstance(location, Location) else locate(location)
    return _type(loc) == pafs.FileType.File


def is_dir(location: str | Location) -> bool:
    """Whether ``location`` is a directory (on an object store: a prefix that holds objects)."""
    loc = location if isinstance(location, Location) else locate(location)
    return _type(loc) == pafs.FileType.Directory


def list_dirs(location: str) -> list[str]:
    """Names of the sub-directories (prefixes) directly under ``location``, sorted.

    On a remote store the listing is recursive: pyarrow's ``GcsFileSystem`` lists,
    one level deep, only the prefixes that have a directory marker object, and a
    release's prefix has none (its objects are copied there one by one).
    """
    loc = locate(location)
    selector = pafs.FileSelector(loc.path, recursive=not loc.local, allow_not_found=True)
    infos = loc.fs.get_file_info(selector)
    if loc.local:
        return sorted(os.path.basename(i.path) for i in infos if i.type == pafs.FileType.Directory)
    names = set()
    for info in infos:
        first, _, rest = info.path[len(loc.path):].strip("/").partition("/")
        if rest or info.type == pafs.FileType.Directory:
            names.add(first)
    return sorted(names)


def read_bytes(location: str | Location) -> bytes:
    """The whole content of a file."""
    loc = location if isinstance(location, Location) else locate(location)
    with loc.fs.open_input_stream(loc.path) as fh:
        return fh.read()


def write_bytes(location: str | Location, data: bytes) -> None:
    """Writes a whole file (one PUT on an object store: visible whole or not at all)."""
    loc = location if isinstance(location, Location) else locate(location)
    with loc.fs.open_output_stream(loc.path) as fh:
        fh.write(data)


def delete_dir(location: str | Location) -> None:
    """Deletes a directory (prefix) and everything under it; nothing if it is absent."""
    loc = location if isinstance(location, Location) else locate(location)
    if _type(loc) == pafs.FileType.Directory:
        try:
            loc.fs.delete_dir(loc.path)
        except FileNotFoundError:
            # GCS: pyarrow deletes the objects, then the prefix's directory marker object, which a
            # prefix made of copied objects does not have. Gone is what was asked.
            if _type(loc) != pafs.FileType.NotFound:
                raise


def is_object_store(loc: Location) -> bool:
    """Whether directories are only key prefixes there (no directory to create or rename)."""
    stores = tuple(getattr(pafs, name) for name in ("S3FileSystem", "GcsFileSystem") if hasattr(pafs, name))
    return isinstance(loc.fs, stores)


def normalize(location: str) -> str:
    """A comparable form: a local realpath, or ``scheme://netloc/path`` with S3 aliases as ``s3``."""
    if is_local(location):
        return os.path.realpath(os.path.expanduser(_local_path(location)))
    u = urlparse(location)
    scheme = "s3" if u.scheme.lower() in _S3_ALIASES else u.scheme.lower()
    return f"{scheme}://{u.netloc}{posixpath.normpath(unquote(u.path) or '/')}".rstrip("/")


def inside(a: str, b: str) -> bool:
    """``a`` is ``b`` or lies under it (both :func:`normalize` d)."""
    sep = "/" if "://" in b else os.sep
    return a == b or a.startswith(b if b.endswith(sep) else b + sep)


def is_under(location: str, root: str) -> bool:
    """Whether ``location`` is ``root`` or lies under it (local paths and URIs alike)."""
    return inside(normalize(location), normalize(root))


def check_root(location: str) -> None:
    """Raises ConfigError unless releases can go under ``location``: checked before anything is charged.

    A scheme pyarrow cannot open, a store that cannot be reached (endpoint,
    credentials) and a bucket or container that does not exist fail here, so a
    job never charges the ledger and then finds it cannot write its release.
    """
    loc = locate(location)
    if loc.local:  # the directories are created when writing
        return
    if loc.path.startswith("/"):  # HDFS: the directories are created when writing; the NameNode must answer
        u = urlparse(location)
        try:
            if u.port is not None:  # host:port named (not an HA name service): hdfs-native would retry for minutes
                socket.create_connection((u.hostname, u.port), timeout=10).close()
            loc.fs.get_file_info("/")
        except OSError as exc:
            raise ConfigError(f"The output {location!r} cannot be reached: {str(exc).splitlines()[0]}") from exc
        return
    top = loc.path.split("/", 1)[0]  # the bucket (S3, GCS) or container (Azure)
    try:
        kind = loc.fs.get_file_info(top).type
    except OSError as exc:
        raise ConfigError(f"The output {location!r} cannot be reached: {exc}") from exc
    if kind != pafs.FileType.Directory:
        raise ConfigError(f"The output {location!r} cannot be written: bucket or container {top!r} does not exist.")
