"""The prepared-rows cache shared by the Python workers of a host (spark_dp.aggregates._worker_cache.HostCache).

In Spark workers ``SPARK_LOCAL_DIRS`` is set (tests/test_tensor_parquet.py
checks the passes there); here it points at a temporary directory and the
tasks' function runs in this process, a fresh ``HostCache`` standing in for
another worker process of the same host.
"""

import os
import time

import numpy as np
import pytest

from spark_dp.aggregates import _worker_cache as wc
from spark_dp.aggregates.moments import parquet_rows
from tests.test_tensor_parquet import D, L, data, expected, replace_file, run_fn, write_list_files


@pytest.fixture
def host(tmp_path, monkeypatch):
    local = tmp_path / "local"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", f"{local},{tmp_path / 'second'}")
    monkeypatch.setattr(wc, "HOST", wc.HostCache())
    wc.CACHE.shrink(0)
    yield local / wc.HOST_SUBDIR
    wc.CACHE.shrink(0)


def _files(root):
    return sorted(p for p in os.listdir(root) if p.endswith(".rows")) if os.path.isdir(root) else []


def _other_worker(monkeypatch):
    """A new process's view: no mappings, no per-worker entries."""
    monkeypatch.setattr(wc, "HOST", wc.HostCache())
    wc.CACHE.shrink(0)


def _planned(spark, tmp_path, seed, **sizes):
    """Parquet files of ``data(seed)``, their planned passes, the unit count and a U."""
    parts = data(seed, **sizes)
    path = write_list_files(str(tmp_path / "x"), parts, **({"row_group_size": 1000} if sizes else {}))
    rows = parquet_rows(path, ["x"], dimension=D, spark=spark)
    return parts, rows, sum(len(t) for t in rows.tasks), np.random.default_rng(seed + 1).standard_normal((D, L))


def test_rows_one_worker_prepared_serve_another(spark, tmp_path, host, monkeypatch):
    parts, rows, units, U = _planned(spark, tmp_path, 21)
    first, h1, r1 = run_fn(rows, U, 1 << 30)
    assert (h1, r1) == (0, units)
    assert len(_files(host)) == units and len(wc.CACHE) == 0  # shared files, nothing held per worker
    assert not [p for p in os.listdir(host) if p.startswith(".tmp-")]  # every write was renamed into place
    assert os.stat(host).st_mode & 0o777 == 0o700  # private data at rest: owner only
    assert {os.stat(host / f).st_mode & 0o777 for f in _files(host)} == {0o600}
    _other_worker(monkeypatch)
    second, h2, r2 = run_fn(rows, U, 1 << 30)
    assert (h2, r2) == (units, 0) and np.allclose(second, first, rtol=1e-13)
    S_np, _, n_np, _ = expected(parts, U, 1.2, "drop")
    assert second[-1] == n_np and np.allclose(second[: D * L], S_np.ravel(), rtol=1e-12)
    cached = next(iter(wc.HOST._maps.values()))
    assert not cached.flags.writeable and type(cached) is np.ndarray
    # a rewritten Parquet file: its units are read again and its old row files deleted
    f = sorted(rows.uris)[0]
    new = np.random.default_rng(23).normal(size=parts[0].shape)
    replace_file(f, tmp_path, [new], "part-0.parquet")
    _other_worker(monkeypatch)
    third, h3, r3 = run_fn(rows, U, 1 << 30)
    changed = sum(1 for t in rows.tasks for u in t if u[0] == f)
    assert (h3, r3) == (units - changed, changed) and len(_files(host)) == units
    S_new, _, n_new, _ = expected([new, parts[1], parts[2]], U, 1.2, "drop")
    assert third[-1] == n_new and np.allclose(third[: D * L], S_new.ravel(), rtol=1e-12)
    # clearing by URI deletes that file's rows only; clearing all deletes the rest
    assert wc.HOST.drop_uris([f]) == changed and len(_files(host)) == units - changed
    assert wc.HOST.drop_uris(None) == units - changed and _files(host) == []


def test_cap_evicts_least_recently_used_files(spark, tmp_path, host, monkeypatch):
    _, rows, units, U = _planned(spark, tmp_path, 24, sizes=(100, 100, 100))
    assert units == 3
    full, _, _ = run_fn(rows, U, 0)
    two_units = 2 * 102 * D * 8
    capped, h, r = run_fn(rows, U, two_units)
    assert (h, r) == (0, 3) and len(_files(host)) == 2 and wc.HOST.nbytes() <= two_units
    assert np.allclose(capped, full, rtol=1e-13)
    tiny, h, r = run_fn(rows, U, 100)  # below any unit: nothing stored, and the older files are kept
    assert (h, r) == (2, 1) and len(_files(host)) == 2 and np.allclose(tiny, full, rtol=1e-13)
    run_fn(rows, U, 102 * D * 8)  # room for one: the least recently used go first
    assert len(_files(host)) == 1


def test_dead_writers_temporaries_are_removed_and_live_ones_kept(host):
    os.makedirs(host)
    old, live = host / ".tmp-1-old", host / ".tmp-2-live"
    old.write_bytes(b"x" * 800)
    live.write_bytes(b"x" * 800)
    t = time.time() - 2 * wc._STALE_TMP_SECONDS
    os.utime(old, (t, t))
    wc.HOST.shrink(0)
    assert not old.exists() and live.exists()


def test_unusable_directory_falls_back_to_the_worker_cache(spark, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the local dir should be")
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(blocker))
    monkeypatch.setattr(wc, "HOST", wc.HostCache())
    wc.CACHE.shrink(0)
    _, rows, units, U = _planned(spark, tmp_path, 26)
    first, h1, r1 = run_fn(rows, U, 1 << 30)
    second, h2, r2 = run_fn(rows, U, 1 << 30)
    assert (h1, r1, h2, r2) == (0, units, units, 0) and len(wc.CACHE) == units
    assert np.allclose(second, first, rtol=1e-13)
    wc.CACHE.shrink(0)


def test_a_truncated_or_foreign_file_is_not_served(host):
    key = wc.unit_key(("file:///x.parquet", 0, 1), (10, 20), ["x"], "list", D, 1.0, "drop")
    os.makedirs(host)
    (host / (wc.file_prefix(key) + ".rows")).write_bytes(b"\0" * (8 * D + 3))  # not whole rows
    assert wc.HOST.get(key) is None
    writer = wc.HOST.create(key, 4, 1 << 20)
    assert writer is not None
    rows = np.arange(4 * D, dtype=float).reshape(4, D)
    assert writer.write(rows[:2]) and writer.write(rows[2:3])  # three rows of the four the metadata allowed
    assert wc.HOST.get(key) is None  # nothing visible before the commit (the bad file was replaced only then)
    assert writer.commit()
    got = wc.HOST.get(key)
    assert got.shape == (3, D) and np.array_equal(got, rows[:3]) and not got.flags.writeable
    over = wc.HOST.create(key, 2, 1 << 20)
    assert over.write(rows[:2]) and not over.write(rows[2:3])  # more rows than reserved: dropped, not published
    assert not over.commit() and np.array_equal(wc.HOST.get(key), rows[:3])
    assert not [p for p in os.listdir(host) if p.startswith(".tmp-")]
    assert wc.HOST.create(key, 10**6, 1 << 20) is None  # larger than the cap: not cached


def test_the_shared_files_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    assert wc.host_dir() == os.path.join(str(tmp_path), wc.HOST_SUBDIR)
    for off in ("off", "0", "false", "OFF"):
        monkeypatch.setenv("SPARK_DP_HOST_CACHE", off)
        assert wc.host_dir() is None
    monkeypatch.setenv("SPARK_DP_HOST_CACHE", "on")
    assert wc.host_dir() is not None
    monkeypatch.delenv("SPARK_LOCAL_DIRS")
    assert wc.host_dir() is None  # outside Spark's Python workers: no shared directory
