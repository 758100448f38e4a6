"""Where releases are stored: local directories, and object stores through ``pyarrow.fs``.

A release location is a string: a local path (or ``file:`` URI), or a URI of
a store that :mod:`pyarrow.fs` opens:

============== ========================================= ====================================================
scheme         file system                               credentials and endpoint (never from a config file)
============== ========================================= ====================================================
``s3://``      ``pyarrow.fs.S3FileSystem``                the AWS credential chain (environment, ``~/.aws``,
(``s3a://``,                                             instance/role metadata); the endpoint from
``s3n://``)                                              ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``
``gs://``      ``pyarrow.fs.GcsFileSystem``               Google application-default credentials
``abfs://``,   ``pyarrow.fs.AzureFileSystem``             the Azure default credential chain (environment,
``abfss://``                                             workload/managed identity, CLI login)
``hdfs://``    ``pyarrow.fs.HadoopFileSystem`` (libhdfs)  the Hadoop configuration (``HADOOP_CONF_DIR``,
                                                         Kerberos ticket cache)
============== ========================================= ====================================================

pyarrow's ``S3FileSystem`` does not read ``AWS_ENDPOINT_URL`` itself (apache/arrow#49643),
so this module passes it (``AWS_ENDPOINT_URL_S3`` first, as the AWS SDKs do) as the
endpoint override; ``s3a://`` and ``s3n://`` (Hadoop's names for S3) are opened as ``s3://``.
No fsspec is needed: pyarrow has a native file system for every scheme above.

Only :mod:`spark_dp.release` writes releases; the readers (``load_release``,
``estimate``, ``report``, merging, plans, ``audit``) go through the helpers here,
so every one of them accepts the same locations.
"""

from __future__ import annotations

import os
import posixpath
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


def _env_key(scheme: str) -> tuple:
    """What the file system of ``scheme`` depends on besides the URI (a cache key part)."""
    if scheme == "s3":
        return tuple(os.environ.get(k) for k in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION",
                                                  "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ACCESS_KEY_ID"))
    return ()


def locate(location: str) -> Location:
    """Opens ``location`` (path or URI): its file system and the path inside it.

    Raises:
        ConfigError: a URI whose scheme pyarrow cannot open (the message names it).
    """
    if is_local(location):
        return Location(pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(_local_path(location))), True)
    u = urlparse(location)
    scheme = u.scheme.lower()
    if scheme in _S3_ALIASES:
        scheme = "s3"
    if scheme == "s3":
        key = ("s3", u.netloc, _env_key("s3"))
        path = f"{u.netloc}{unquote(u.path)}".rstrip("/")
        with _lock:
            fs = _cache.get(key)
            if fs is None:
                fs = _cache[key] = _s3(u.netloc)
        return Location(fs, path, False)
    try:
        fs, path = pafs.FileSystem.from_uri(location)
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
    """Names of the sub-directories (prefixes) directly under ``location``, sorted."""
    loc = locate(location)
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=False, allow_not_found=True))
    return sorted(posixpath.basename(i.path.rstrip("/")) if not loc.local else os.path.basename(i.path)
                  for i in infos if i.type == pafs.FileType.Directory)


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
        loc.fs.delete_dir(loc.path)


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
    if loc.local or loc.path.startswith("/"):  # local and HDFS: the directories are created when writing
        return
    top = loc.path.split("/", 1)[0]  # the bucket (S3, GCS) or container (Azure)
    try:
        kind = loc.fs.get_file_info(top).type
    except OSError as exc:
        raise ConfigError(f"The output {location!r} cannot be reached: {exc}") from exc
    if kind != pafs.FileType.Directory:
        raise ConfigError(f"The output {location!r} cannot be written: bucket or container {top!r} does not exist.")
