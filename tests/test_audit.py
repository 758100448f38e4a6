"""``spark-dp audit``: the ledger audits the releases (issue #16, item 2).

One output root is produced by the API across the families (second moment,
AdaSSP regression, Gaussian and Laplace sketches and their merge, private
and input-perturbation tensors, a public-tensor release and a non-private
opt-in under ``nonprivate/``), with its ledger inside the root as the
default layout has it. The audit passes on it untouched and fails, naming
the release, on each tampering: an edited ε, an edited σ, an edited events
list, a deleted release directory, a release directory with no charge, a
merge claiming an uncharged part, a non-private release claiming privacy,
and a charge never written (until its crash is recorded).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import spark_dp
from spark_dp.audit import audit_releases
from spark_dp.cli.main import main as cli_main
from spark_dp.privacy import Budget, GaussianEvent, open_ledger
from spark_dp.sketch.merge import merge_sketches
from spark_dp.tensor.api import tensor_decomposition
from tests._tensor_data import orthogonal_tensor

COLS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def produced(spark, tmp_path_factory):
    """(root, ledger uri, backup dir): releases of every family, written once for the module."""
    base = tmp_path_factory.mktemp("audit")
    root = base / "releases"
    uri = f"sqlite:///{root}/ledger.db"  # the default layout: the ledger inside the output root
    rng = np.random.default_rng(0)
    rows = [(f"u{i % 7}", *map(float, r), str(rng.choice(list("abcde")))) for i, r in
            enumerate(rng.normal(size=(60, 3)) / 3)]
    df = spark.createDataFrame(rows, ["user", *COLS, "item"])
    dp = spark_dp.DPSession("shop", ledger=uri, epsilon_limit=100.0, delta_limit=1e-3, output=str(root),
                            sampler="numpy")
    dp.second_moment(df, COLS, epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="cov")
    dp.linear_regression(df, ["a", "b"], "c", epsilon=1.0, delta=1e-6, norm_bound=1.0, mechanism="adassp",
                         release_id="ols")
    s1 = dp.count_sketch(df, "item", epsilon=0.5, delta=1e-6, repetitions=3, buckets=16, release_id="sk1")
    s2 = dp.count_sketch(df, "item", epsilon=0.5, delta=1e-6, repetitions=3, buckets=16, seeds=s1, release_id="sk2")
    merge_sketches([s1, s2], release_id="sk-week", output=str(root))
    dp.count_sketch(df, "item", epsilon=0.5, delta=1e-6, mechanism="count_min", repetitions=3, buckets=16,
                    release_id="cm")
    T, _, _ = orthogonal_tensor(4, 2)
    tensors = spark_dp.DPSession("tensor", ledger=uri, epsilon_limit=100.0, delta_limit=1e-3, output=str(root),
                                 sampler="numpy")
    tensor_decomposition(tensors, T, k=1, epsilon=2.0, delta=1e-6, restarts=2, iterations=3, release_id="tpm",
                         rng=np.random.default_rng(1))
    tensor_decomposition(tensors, T, k=1, epsilon=2.0, delta=1e-6, mechanism="input_perturbation", restarts=2,
                         iterations=3, release_id="tip", rng=np.random.default_rng(1))
    dp.tensor_decomposition(df.select(*COLS), k=1, columns=COLS, epsilon=2.0, delta=1e-6, norm_bound=2.0,
                            restarts=2, iterations=2, mode="reuse", release_id="tpr", rng=np.random.default_rng(1))
    public = spark_dp.DPSession("public", ledger=uri, output=str(root), sampler="numpy")
    tensor_decomposition(public, T, k=1, mechanism="power_method", restarts=2, iterations=3, release_id="alg1",
                         rng=np.random.default_rng(1))
    tensor_decomposition(public, df.select(*COLS), k=1, mechanism="online_power_method", columns=COLS,
                         norm_bound=2.0, restarts=2, iterations=3, mode="reuse", private=False, release_id="online",
                         rng=np.random.default_rng(1))
    backup = base / "backup"
    shutil.copytree(root, backup)
    return root, uri, backup


@pytest.fixture
def pristine(produced):
    """The produced root and ledger, restored from the backup before each test (tests tamper with them)."""
    root, uri, backup = produced
    shutil.rmtree(root)
    shutil.copytree(backup, root)
    return root, uri


def _audit(capsys, root, uri):
    code = cli_main(["audit", "--ledger", uri, str(root), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def _kinds(report):
    return {(f["kind"], f["release_id"]) for f in report["findings"]}


def _edit(root, rid, fn, sub=""):
    path = os.path.join(root, sub, rid, "manifest.json")
    with open(path) as fh:
        m = json.load(fh)
    fn(m)
    with open(path, "w") as fh:
        json.dump(m, fh)


def test_the_untampered_root_passes(pristine, capsys):
    root, uri = pristine
    code, report, err = _audit(capsys, root, uri)
    assert code == 0 and report["ok"] and err == "", report["findings"]
    assert report["releases_matched"] == report["charges"] == 8  # cov, ols, sk1, sk2, cm, tpm, tip, tpr
    assert _kinds(report) == {("derived", "sk-week"), ("nonprivate", "alg1"), ("nonprivate", "nonprivate-online")}
    assert cli_main(["audit", "--ledger", uri, str(root)]) == 0
    assert "audit OK" in capsys.readouterr().out


@pytest.mark.parametrize("rid, edit, needle", [
    ("cov", lambda m: m["privacy"].update(epsilon=0.5), "epsilon=0.5"),
    ("cov", lambda m: m["privacy"].update(noise_sigma=m["privacy"]["noise_sigma"] / 2), "noise_sigma="),
    ("sk1", lambda m: m["privacy"].update(noise_sigma=m["privacy"]["noise_sigma"] * 0.9), "noise_sigma="),
    ("cm", lambda m: m["privacy"].update(noise_scale=m["privacy"]["noise_scale"] / 3), "noise_scale="),
    # manifest schema 2: a Gaussian release's noise_scale is its σ; editing it (or its family) is caught too
    ("cov", lambda m: m["privacy"].update(noise_scale=m["privacy"]["noise_scale"] / 2), "noise_scale="),
    ("sk1", lambda m: m["privacy"].update(noise_family="laplace"), "no LaplaceEvent was charged"),
    ("ols", lambda m: m["privacy"]["noise_sigma"].__setitem__(1, 0.01), "noise_sigma="),
    ("tip", lambda m: m["privacy"]["events"][0].update(noise_multiplier=1.0), "events="),
    ("tpm", lambda m: m["privacy"].update(delta=1e-9), "delta=1e-09"),
    # the tensor power method: its noise plan recomputed from the declared parameters (ν, σ, Δ, events)
    ("tpm", lambda m: m["privacy"].update(nu=m["privacy"]["nu"] / 2), "nu="),
    ("tpm", lambda m: m["params"].update(iterations=5), "the declared parameters give 12 Gaussian events"),
    ("tpr", lambda m: m["privacy"].update(**{key: m["privacy"][key] / 2 for key in
                                             ("noise_scale", "noise_sigma", "sensitivity")}), "noise_scale="),
    ("tpr", lambda m: m["privacy"].update(norm_bound=1.0), "recomputed from the declared parameters"),
    ("cov", lambda m: m.update(dataset_id="other"), "dataset_id='other'"),
    ("sk-week", lambda m: m["merged_from"].append("never-charged"), "without a ledger charge: never-charged"),
])
def test_an_edited_manifest_is_a_mismatch_naming_the_release(pristine, capsys, rid, edit, needle):
    root, uri = pristine
    _edit(root, rid, edit)
    code, report, err = _audit(capsys, root, uri)
    assert code == 1 and not report["ok"]
    [bad] = [f for f in report["findings"] if f["kind"] == "mismatch"]
    assert bad["release_id"] == rid and needle in bad["message"]
    assert f"mismatch: release {rid}" in err


def test_a_deleted_release_directory_is_missing(pristine, capsys):
    root, uri = pristine
    shutil.rmtree(root / "tpm")
    code, report, err = _audit(capsys, root, uri)
    assert code == 1 and ("missing", "tpm") in _kinds(report) and "missing: release tpm" in err


def test_a_release_directory_without_a_charge_is_an_orphan(pristine, capsys):
    root, uri = pristine
    shutil.copytree(root / "cov", root / "cov-copy")
    _edit(root, "cov-copy", lambda m: m.update(release_id="cov-copy"))
    shutil.copytree(root / "ols", root / "renamed")  # its manifest still says 'ols': a second directory for it
    code, report, err = _audit(capsys, root, uri)
    assert code == 1
    assert ("orphan", "cov-copy") in _kinds(report) and "orphan: release cov-copy" in err
    [dup] = [f for f in report["findings"] if f["path"] and f["path"].endswith("renamed")]
    assert dup["kind"] == "mismatch" and "not the release id" in dup["message"] and "second directory" in dup["message"]


def test_a_missing_payload_file_is_a_mismatch(pristine, capsys):
    root, uri = pristine
    os.remove(root / "cov" / "matrix.parquet")
    code, report, _ = _audit(capsys, root, uri)
    assert code == 1 and ("mismatch", "cov") in _kinds(report)


def test_nonprivate_releases_are_reported_not_orphans_unless_they_claim_privacy(pristine, capsys):
    root, uri = pristine
    _edit(root, "nonprivate-online", lambda m: m["privacy"].update(private=True, epsilon=1.0), sub="nonprivate")
    code, report, _ = _audit(capsys, root, uri)
    assert code == 1 and ("mismatch", "nonprivate-online") in _kinds(report)
    assert not any(f["kind"] == "orphan" for f in report["findings"])


def test_a_charge_without_a_release_fails_until_its_crash_is_recorded(pristine, capsys):
    root, uri = pristine
    ledger = open_ledger(uri)
    ledger.charge(release_id="crashed-run", dataset_id="shop", request_sha256="x", events=[GaussianEvent(5.0)],
                  budget=Budget(1.0, 1e-6))
    code, report, err = _audit(capsys, root, uri)
    assert code == 1 and ("unwritten", "crashed-run") in _kinds(report) and "unwritten: release crashed-run" in err
    assert cli_main(["ledger", "--uri", uri, "--record-crash", "crashed-run", "executor lost"]) == 0
    capsys.readouterr()
    code, report, _ = _audit(capsys, root, uri)
    assert code == 0 and ("crashed", "crashed-run") in _kinds(report)
    assert "executor lost" in next(f["message"] for f in report["findings"] if f["kind"] == "crashed")
    assert ledger.lookup("crashed-run").crash == "executor lost"
    assert cli_main(["ledger", "--uri", uri, "--record-crash", "cov", "no"]) == 2  # a written release did not crash
    assert "was written" in capsys.readouterr().err


def test_releases_written_elsewhere_are_noted_and_a_bad_root_is_an_error(pristine, tmp_path, capsys):
    root, uri = pristine
    other = tmp_path / "other-root"
    other.mkdir()
    report = audit_releases(open_ledger(uri), str(other))
    assert report.ok and {f.kind for f in report.findings} == {"elsewhere"} and len(report.findings) == 8
    assert cli_main(["audit", "--ledger", uri, str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["audit", "--ledger", f"sqlite:///{tmp_path}/none.db", str(root)]) == 2
    assert not (tmp_path / "none.db").exists()  # auditing never creates a ledger


def _written(ledger, root, rid, dataset, z):
    """A charge and a release directory whose manifest is what the pipeline writes for it (no Spark)."""
    ev = GaussianEvent(z)
    charge = ledger.charge(release_id=rid, dataset_id=dataset, request_sha256=f"sha-{rid}", events=[ev],
                           budget=Budget(1.0, 1e-6), limit=Budget(50.0, 1e-5))
    path = root / rid
    path.mkdir(parents=True)
    np.save(path / "x.npy", np.zeros(1))  # a payload file named in the manifest
    (path / "manifest.json").write_text(json.dumps({
        "release_id": rid, "dataset_id": dataset, "request_sha256": f"sha-{rid}", "payload": {"x": {"file": "x.npy"}},
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "events": [{"type": "gaussian", "noise_multiplier": z}],
                    "ledger_entry": charge.seq, "sensitivity": 2.0, "noise_sigma": 2.0 * z}}))
    ledger.mark_written(rid, str(path))


def test_the_audit_reads_either_ledger_backend(any_ledger_uri, tmp_path, capsys):
    ledger = open_ledger(any_ledger_uri)
    root = tmp_path / "out"
    for i, day in enumerate(("2026-01-01", "2026-01-02")):
        _written(ledger, root, f"r{i}", f"shop@{day}", 4.0 + i)
    ledger.charge(release_id="lost", dataset_id="shop@2026-01-03", request_sha256="x", events=[GaussianEvent(4.0)],
                  budget=Budget(1.0, 1e-6), limit=Budget(50.0, 1e-5))
    report = audit_releases(ledger, str(root))
    assert not report.ok and [(f.kind, f.release_id) for f in report.problems] == [("unwritten", "lost")]
    ledger.record_crash("lost", "killed")
    report = audit_releases(ledger, str(root))
    assert report.ok and report.releases == 2 and report.charges == 3
    _edit(root, "r1", lambda m: m["privacy"].update(noise_sigma=m["privacy"]["noise_sigma"] * 1.01))
    assert cli_main(["audit", "--ledger", any_ledger_uri, str(root)]) == 1
    out, err = capsys.readouterr()
    assert "MISMATCH" in out and "r1" in out and "audit FAILED" in out and "mismatch: release r1" in err


def test_a_whitened_tensor_release_is_replanned_from_its_declared_parameters():
    from spark_dp.audit import _tensor_mismatches
    from spark_dp.tensor.whiten import whitened_rows_plan

    plan = whitened_rows_plan(epsilon=2.0, delta=1e-6, k=2, L=3, R=4, norm_bound=1.5, mode="reuse",
                              neighbors="replace", max_rows_per_unit=2)
    manifest = {"task": "tensor_decomposition", "mechanism": "private_power_method",
                "params": {"k": 2, "restarts": 3, "iterations": 4, "calibration": "exact", "whiten": True,
                           "mode": "reuse"},
                "privacy": {"epsilon": 2.0, "delta": 1e-6, "neighbors": "replace", "norm_bound": 1.5,
                            "max_rows_per_unit": 2, "second_moment_sigma": plan.sigma,
                            "sensitivity": {"second_moment": plan.sensitivity, "power_passes": "f*m*sqrt(L)*B_y^3"},
                            "noise_multiplier": plan.noise_multiplier}}
    assert _tensor_mismatches(manifest, list(plan.events)) == []
    manifest["privacy"]["second_moment_sigma"] *= 0.5
    assert any(m.startswith("second_moment_sigma=") for m in _tensor_mismatches(manifest, list(plan.events)))
    manifest["privacy"]["second_moment_sigma"] = plan.sigma
    assert "the ledger charged 2" in _tensor_mismatches(manifest, list(plan.events)[:2])[0]
    del manifest["params"]["iterations"]
    assert "cannot be recomputed" in _tensor_mismatches(manifest, list(plan.events))[0]
