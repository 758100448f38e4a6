"""The SQLite ledger: no overspend under concurrency, append-only, idempotent ids."""

import multiprocessing as mp
import sqlite3

import pytest

from spark_dp.errors import BudgetExceededError, ConfigError, LedgerError, ReleaseConflictError
from spark_dp.privacy import Budget, GaussianEvent, compose_epsilon, gaussian_noise_multiplier, open_ledger

DELTA = 1e-6
Z = gaussian_noise_multiplier(1.0, DELTA)


def _limit_for(k: int) -> Budget:
    """A limit that admits exactly k releases of GaussianEvent(Z)."""
    lo = compose_epsilon([GaussianEvent(Z)] * k, DELTA)
    hi = compose_epsilon([GaussianEvent(Z)] * (k + 1), DELTA)
    return Budget((lo + hi) / 2, DELTA)


def _racer(uri: str, worker: int, attempts: int, limit: Budget, queue) -> None:
    ledger = open_ledger(uri)
    ok = 0
    for a in range(attempts):
        try:
            ledger.charge(release_id=f"w{worker}-{a}", dataset_id="race", request_sha256="x",
                          events=[GaussianEvent(Z)], budget=Budget(1.0, DELTA), limit=limit)
            ok += 1
        except BudgetExceededError:
            pass
    queue.put(ok)


@pytest.mark.parametrize("workers, attempts, admitted", [(8, 50, 150)], ids=["8x50"])
def test_racing_processes_never_overspend(any_ledger_uri, workers, attempts, admitted):
    ledger_uri = any_ledger_uri
    limit = _limit_for(admitted)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(ledger_uri, w, attempts, limit, queue)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    successes = sum(queue.get(timeout=10) for _ in procs)
    ledger = open_ledger(ledger_uri)
    (status,) = ledger.status("race")
    assert successes == admitted == status.releases
    assert status.spent_epsilon <= limit.epsilon
    assert len(ledger.charges("race")) == admitted


def test_dry_run_charges_nothing_and_over_budget_is_refused(any_ledger_uri):
    ledger = open_ledger(any_ledger_uri)
    limit = _limit_for(2)
    ledger.check("ds", [GaussianEvent(Z)], limit)
    assert ledger.status("ds") == []  # a dry run does not even register the dataset
    for i in range(2):
        ledger.charge(release_id=f"r{i}", dataset_id="ds", request_sha256="x", events=[GaussianEvent(Z)],
                      budget=Budget(1, DELTA), limit=limit)
    with pytest.raises(BudgetExceededError, match="would be exceeded"):
        ledger.check("ds", [GaussianEvent(Z)], limit)
    with pytest.raises(BudgetExceededError):
        ledger.charge(release_id="r3", dataset_id="ds", request_sha256="x", events=[GaussianEvent(Z)],
                      budget=Budget(1, DELTA), limit=limit)
    assert ledger.lookup("r3") is None
    assert ledger.status("ds")[0].releases == 2


def test_release_id_is_charged_once(any_ledger_uri):
    ledger = open_ledger(any_ledger_uri)
    kw = dict(dataset_id="ds", request_sha256="x", events=[GaussianEvent(Z)], budget=Budget(1, DELTA),
              limit=Budget(10, 1e-5))
    ledger.charge(release_id="same", **kw)
    with pytest.raises(ReleaseConflictError):
        ledger.charge(release_id="same", **kw)
    assert ledger.status("ds")[0].releases == 1


def test_limits_change_only_explicitly(any_ledger_uri):
    ledger = open_ledger(any_ledger_uri)
    ledger.ensure_dataset("ds", Budget(1.0, 1e-6))
    with pytest.raises(ConfigError, match="set-limit"):
        ledger.ensure_dataset("ds", Budget(2.0, 1e-6))
    ledger.set_limit("ds", Budget(2.0, 1e-6))
    assert ledger.ensure_dataset("ds", None) == Budget(2.0, 1e-6)


def test_charges_are_append_only_and_written_marks_are_separate(ledger_uri, tmp_path):
    ledger = open_ledger(ledger_uri)
    c = ledger.charge(release_id="a", dataset_id="ds", request_sha256="x", events=[GaussianEvent(Z)],
                      budget=Budget(1, DELTA), limit=Budget(10, 1e-5))
    assert not ledger.lookup("a").written
    ledger.mark_written("a", str(tmp_path))
    got = ledger.lookup("a")
    assert got.written and got.location == str(tmp_path) and got.seq == c.seq
    with pytest.raises(sqlite3.IntegrityError):
        ledger.mark_written("a", "elsewhere")  # a release is written once


def test_postgres_ledger_keeps_the_same_promises_across_reconnects(postgres_base):
    from tests._postgres import create_database

    uri = create_database(postgres_base, "reconnect")
    a = open_ledger(uri)
    a.charge(release_id="p1", dataset_id="ds", request_sha256="x", events=[GaussianEvent(Z)],
             budget=Budget(1, DELTA), limit=Budget(10, 1e-5))
    b = open_ledger(uri)  # a second "host"
    assert b.lookup("p1").events == (GaussianEvent(Z),)
    with pytest.raises(ReleaseConflictError):
        b.charge(release_id="p1", dataset_id="ds", request_sha256="x", events=[GaussianEvent(Z)],
                 budget=Budget(1, DELTA), limit=Budget(10, 1e-5))
    assert b.status("ds")[0].spent_epsilon == pytest.approx(a.status("ds")[0].spent_epsilon)


def test_unknown_dataset_without_limit_is_a_clear_error(any_ledger_uri):
    with pytest.raises(ConfigError, match="epsilon_limit"):
        open_ledger(any_ledger_uri).check("nobody", [GaussianEvent(Z)], None)


def test_bad_ledger_uri():
    with pytest.raises(ConfigError, match="ledger.uri"):
        open_ledger("mysql://host/db")


def test_unreachable_postgres_is_a_clear_error():
    from tests._postgres import free_port

    with pytest.raises(LedgerError, match="cannot open ledger"):
        open_ledger(f"postgresql://nobody@127.0.0.1:{free_port()}/x")
