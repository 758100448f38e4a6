"""Python API of the tensor family: ``DPSession.tensor_decomposition``.

Mechanisms:

==========================  ==============  ==================================  ===========
mechanism                   data            neighbours                          private
==========================  ==============  ==================================  ===========
``power_method``            explicit tensor —                                   no (Alg. 1)
``online_power_method``     DataFrame rows  —                                   no (Alg. 2)
``private_power_method``    explicit tensor ``tensor_entry`` (Def. 4.2)         yes (Alg. 3)
``private_power_method``    DataFrame rows  ``add_remove`` / ``replace``        yes
``input_perturbation``      explicit tensor ``tensor_entry``                    yes
==========================  ==============  ==================================  ===========

Every mechanism goes through :func:`spark_dp.release.pipeline.run_release` (private ones: all events
planned from public parameters and charged once; every draw through the
chokepoint). The non-private mechanisms are for public data and testing: they
charge nothing, are written with ``"private": false`` in the manifest and log
a warning. On rows (the session's dataset) a non-private mechanism releases
exact results computed from the data, so it needs the explicit opt-in
``private=False`` (configs: ``privacy: {mode: none}``), is refused on a
dataset that has a privacy budget (in the ledger or the session), and is
written under ``<output>/nonprivate/`` with a release id starting
``nonprivate-``, so no reader can take it for a private release. Alg. 1 on
an explicit (public) tensor needs no opt-in.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import types
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.privacy import Budget, Chokepoint, compose_epsilon
from spark_dp.release import Release
from spark_dp.release.lineage import input_lineage
from spark_dp.release.pipeline import Noised, ReleasePlan, confidence_of, confidence_request, run_release
from spark_dp.second_moment._prepare import (
    DEFAULT_BOUNDS_SHARE,
    DEFAULT_NORM_BOUND_QUANTILE,
    DEFAULT_NORM_BOUND_SHARE,
    auto_privacy,
    mechanism_budget,
    nonfinite_policy,
)
from spark_dp.tensor.mechanisms import EXPLICIT_ONLY, PRIVATE, ROWS_ONLY, TENSOR_MECHANISMS, TensorRequest, on_input
from spark_dp.tensor.mechanisms import PARAMS as TENSOR_PARAMS
from spark_dp.tensor.online import passes_per_component
from spark_dp.tensor.power_method import TensorDecomposition, check_counts, check_tensor

if TYPE_CHECKING:
    from spark_dp.session import DPSession

log = logging.getLogger("spark_dp")

OWNER = "tensor_decomposition"


def pass_seed(session: DPSession) -> int:
    """The secret seed of fresh mode's pass assignment: 62 bits of the session sampler's key (OS entropy).

    Never drawn from ``rng`` (the random-start generator a caller may seed):
    who knows the seed knows which rows share a pass. Only a seeded test
    sampler, whose releases are marked not private, makes it reproducible.
    Not released.
    """
    return session.sampler.key() & ((1 << 62) - 1)


def load_tensor(path: str) -> np.ndarray:
    """Reads an explicit tensor from a ``.npy`` file (SchemaError if absent or unreadable)."""
    if not os.path.isfile(path):
        raise SchemaError(f"Input path {path!r} does not exist.")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise SchemaError(f"Input path {path!r} is not a .npy array file: {exc}") from None


def _payload(dec: TensorDecomposition) -> dict[str, np.ndarray]:
    return {"eigenvalues": np.asarray(dec.eigenvalues, dtype=np.float64),
            "eigenvectors": np.asarray(dec.eigenvectors, dtype=np.float64)}


def tensor_decomposition(
    session: DPSession,
    data: Any,
    columns: list[str] | str | None = None,
    k: int | None = None,
    *,
    mechanism: str = "private_power_method",
    epsilon: float | None = None,
    delta: float | None = None,
    norm_bound: float | str | None = None,
    bounds: dict[str, Any] | str | None = None,
    neighbors: str | None = None,
    restarts: int = 20,
    iterations: int = 30,
    mode: str = "fresh",
    rows_per_round: int | None = None,
    calibration: str = "exact",
    whiten: bool = False,
    entry_scale: float = 1.0,
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    release_id: str | None = None,
    confidence: float = 0.95,
    rng: np.random.Generator | None = None,
    dataset_path: str | None = None,
    config_sha256: str | None = None,
    source_paths: list[str] | None = None,
    worker_cache_bytes: int | None = None,
    clear_worker_cache: bool = False,
    private: bool | None = None,
    bounds_share: float = DEFAULT_BOUNDS_SHARE,
    norm_bound_share: float = DEFAULT_NORM_BOUND_SHARE,
    norm_bound_quantile: float = DEFAULT_NORM_BOUND_QUANTILE,
) -> Release:
    """Releases the first k eigenpairs of a symmetric third-order tensor (Wang & Anandkumar 2016).

    Args:
        session: the DPSession (dataset, ledger, sampler, output).
        data: an explicit symmetric tensor (numpy array of shape (d, d, d),
            or a path to a ``.npy`` file), or a DataFrame whose rows x define
            the tensor Σ x^⊗3 (never formed).
        columns: numeric columns, or one array/vector column (DataFrames;
            None for an explicit tensor).
        k: components, 1 ≤ k ≤ d (required).
        mechanism: ``power_method``, ``online_power_method``,
            ``private_power_method`` or ``input_perturbation`` (see the module table).
        epsilon, delta: the release's (ε, δ) (private mechanisms).
        norm_bound: B, rows clipped to ‖x‖₂ ≤ B (DataFrames; required
            unless every column has ``bounds``: then B = √d by default), or
            ``"auto"`` (opt-in; private mechanisms): B is chosen privately
            as the ``norm_bound_quantile`` of the row norms, by the
            exponential mechanism over the public grid 2^(j/4) (with every
            column bounded: only [√d/256, √d], and √d)
            (:func:`spark_dp.privacy.quantile.private_quantile`, as
            :func:`spark_dp.second_moment.api.second_moment` does), at
            ε·``norm_bound_share``: one (ε·share, 0) event
            ``exponential_quantile`` charged with the release's other events
            before any row is read. Its scores |#{‖a‖ ≤ c} − α·n| have L∞
            sensitivity m·max(α, 1 − α) (add/remove one unit of ≤ m rows) or
            m (replace one unit). The mechanism is then calibrated to the
            remaining ε at the chosen B: its noise multiplier σ/Δ does not
            depend on B (Δ = f·m·√L·B³), so its events are fixed before the
            choice and the two compose adaptively. The manifest's
            ``norm_bound_auto`` states the chosen B and the σ, Δ at it.
        bounds: public per-column bounds in the data's units,
            ``{column: [lo, hi]}`` (numeric columns of a DataFrame; as for
            :func:`spark_dp.second_moment.api.second_moment`), or ``"auto"``
            (see ``bounds_share``). Each value is clamped to [lo, hi] and mapped to
            aᵢ = (xᵢ − cᵢ)/hᵢ ∈ [−1, 1], cᵢ = (lo + hi)/2, hᵢ = (hi − lo)/2,
            so ‖a‖₂ ≤ √d and ``norm_bound`` may be omitted (the sensitivity
            is that of B = √d). The decomposition is that of Σ a^⊗3, the
            third moment of the scaled rows centred at the bounds'
            midpoints: ``eigenvalues``, their intervals and ``eigenvectors``
            are in those units. A third moment has no constant column to
            carry the shift back (undoing it needs the first and second
            moments, which are not released), so only the diagonal scaling
            is mapped back, exactly: array ``directions`` (k, d) =
            eigenvectors·diag(h) (with ``whiten``: components·diag(h)), and
            Σ (x̄ − c)^⊗3 ≈ Σᵢ λᵢ directionsᵢ^⊗3 (with ``whiten``:
            Σᵢ weightsᵢ·directionsᵢ^⊗3) for the clamped rows x̄, in the
            data's units. The manifest's ``scaling`` states the map.
        neighbors: ``tensor_entry`` (explicit tensors, the default there) or
            ``add_remove`` (rows, default) / ``replace``.
        restarts: L ≥ 1. iterations: R ≥ 1.
        mode: ``fresh`` (each pass reads its own disjoint chunk of rows; private
            passes compose in parallel) or ``reuse`` (all rows every pass;
            sequential composition). Rows only.
        rows_per_round: public n dividing the per-pass sums (rows only); if
            None the non-private method divides by exact counts and the
            private one releases eigenvalues of the sums.
        calibration: ``exact`` (default) or ``paper`` (Alg. 3's advanced
            composition + classic Gaussian mechanism).
        whiten: rows only: whiten by the (private) second moment to k
            dimensions first, for linearly independent, non-orthogonal
            components (:mod:`spark_dp.tensor.whiten`); adds payload arrays
            ``components`` (k, d) and ``weights`` (k,).
        entry_scale: c in the ``tensor_entry`` relation T' − T = ±c·sym(eᵢ⊗eⱼ⊗eₖ).
        nonfinite, dimension, privacy_unit, max_rows_per_unit: row handling,
            as in :func:`spark_dp.second_moment.api.second_moment`.
        release_id: idempotency key (None: for a private release, the
            default id from the dataset, the request and the input's lineage,
            :func:`spark_dp.release.ids.default_release_id`).
        confidence: the level of the eigenvalue intervals, in (0, 1)
            (post-processing, no privacy cost).
        rng: generator for the random starts only (never privacy noise);
            default fresh OS entropy.
        dataset_path: path of the data, recorded in the request (jobs).
        config_sha256: digest of the job config.
        source_paths: the Parquet files ``data`` is a plain read of (as the
            job passes for ``format: parquet``; detected when ``data`` is
            one). The passes then read the files in the tasks and keep the
            prepared rows in a bounded cache shared by the Python workers of
            each host (files mapped from Spark's local directories; per
            worker where there are none), so later rounds do only BLAS
            (:func:`spark_dp.aggregates.moments.parquet_rows`); same
            results. In ``fresh`` mode the tasks give each row the pass the
            Spark path gives it (:mod:`spark_dp.aggregates._fresh`: one more
            job, no shuffle). A ``privacy_unit`` (and, in ``fresh`` mode, an
            array column with ``nonfinite="zero"``) keeps the Spark path.
            Leave None for any other DataFrame.
        worker_cache_bytes: cap of the block cache for ``source_paths``:
            per host for the shared files, per Python worker otherwise
            (default 2 GiB); 0 reads the files every round.
        clear_worker_cache: after the decomposition, drop its rows from the
            caches (best effort) instead of leaving them to the cap, Spark's
            idle-worker timeout and the application's end.
        private: must be ``False`` — exactly — to run a non-private
            mechanism (``online_power_method``) on rows: it releases exact
            results computed from the data. Refused when the dataset has a
            privacy budget; written under ``<output>/nonprivate/`` with a
            ``nonprivate-`` release id. Leave None otherwise.
        bounds_share: with ``bounds="auto"`` (opt-in; private mechanisms),
            each column's [lo, hi] is chosen privately from the data by two
            exponential-mechanism selections over the public grid
            −2^(j/4), 0, 2^(j/4) at ε·``bounds_share``/(2d) each (the
            magnitude M as the 0.95 quantile of |x|, then [l, M] or [−M, h]
            with l, h the 0.05 / 0.95 quantiles:
            :func:`spark_dp.privacy.quantile.private_bounds`, the
            second-moment family's selection), all 2d charged as ONE
            (ε·``bounds_share``, 0) event ``exponential_quantile_bounds``
            of the same release, before any row is read. Neighbours: the
            release's (add/remove or replace one privacy unit of ≤ m rows,
            after contribution bounding); each selection's scores (counts of
            values) have L∞ sensitivity m·0.95 (add/remove) or m (replace).
            The rows are then clamped and scaled with the chosen bounds as
            with public ones (B = √d unless ``norm_bound`` is a number; not
            ``"auto"``), and the power method is calibrated to the remaining
            ε·(1 − ``bounds_share``): its sensitivity is that of B, whatever
            bounds were chosen. The manifest's ``bounds_auto`` states the
            chosen bounds (and a warning when a column's collapsed to about
            0: too few rows for the share); ``directions`` maps back with
            them. In (0, 1); default 0.1.
        norm_bound_share, norm_bound_quantile: with ``norm_bound="auto"``,
            the share of ε of the choice, in (0, 1) (default 0.1), and the
            row-norm quantile it targets, in (0, 1) (default 0.95).

    Returns:
        A :class:`Release` with arrays ``eigenvalues`` (k,) and
        ``eigenvectors`` (k, d), components in the order found (and
        ``directions`` (k, d) with ``bounds``).
    """
    if k is None:
        raise ConfigError(f"The 'k' parameter of {OWNER} (the number of components) is required.")
    V.check_option("mechanism", mechanism, TENSOR_MECHANISMS, owner=OWNER)
    for name, value in (("calibration", calibration), ("mode", mode), ("private", private)):
        TENSOR_PARAMS.check(name, value, owner=OWNER)
    whiten, rows_per_round, entry_scale = (P.check(n, v, owner=OWNER) for n, v in (
        ("whiten", whiten), ("rows_per_round", rows_per_round), ("entry_scale", entry_scale)))
    bounds_share, norm_bound_share, norm_bound_quantile = (P.check(n, v, owner=OWNER) for n, v in (
        ("bounds_share", bounds_share), ("norm_bound_share", norm_bound_share),
        ("norm_bound_quantile", norm_bound_quantile)))
    rng = rng if rng is not None else np.random.default_rng()  # random starting vectors (public), not privacy noise
    explicit = not P.is_dataframe(data)
    if explicit and mechanism in ROWS_ONLY:
        raise ConfigError(f"The 'mechanism' {mechanism!r} of {OWNER} needs rows (a DataFrame), not an explicit tensor.")
    if not explicit and mechanism in EXPLICIT_ONLY:
        raise ConfigError(f"The 'mechanism' {mechanism!r} of {OWNER} needs an explicit tensor, not rows.")
    if private is False and mechanism in PRIVATE:
        raise ConfigError(f"The 'private' parameter of {OWNER} is False but mechanism {mechanism!r} is private; "
                          "leave 'private' unset.")
    if private is False and explicit:
        raise ConfigError(f"The 'private' parameter of {OWNER} applies to rows (a DataFrame) only: Alg. 1 on an "
                          "explicit (public) tensor needs no opt-in.")
    if not explicit and mechanism not in PRIVATE:
        _check_nonprivate_opt_in(session, mechanism, private)
    private = mechanism in PRIVATE
    if private:
        epsilon, delta = P.check("epsilon", epsilon, owner=OWNER), P.check("delta", delta, owner=OWNER)
    neighbors = neighbors or ("tensor_entry" if explicit else "add_remove")
    V.check_option("neighbors", neighbors, ("tensor_entry",) if explicit else ("add_remove", "replace"), owner=OWNER)
    params = {"k": k, "restarts": restarts, "iterations": iterations, "calibration": calibration, "whiten": whiten}
    common = {"dataset_id": session.dataset_id, "task": "tensor_decomposition", "mechanism": mechanism,
              "epsilon": epsilon, "delta": delta, "neighbors": neighbors, "sampler": session.sampler.name,
              "dataset_path": dataset_path, "config_sha256": config_sha256,
              **confidence_request(P.check("confidence", confidence, owner=OWNER))}

    context = {name: value for name, value in locals().items() if name != "explicit"}
    plan = (_explicit_plan if explicit else _rows_plan)(**context)
    # What the release is computed from (a DataFrame's tables/files, a .npy path, or in memory): manifest + ledger.
    return run_release(session, dataclasses.replace(plan, lineage=functools.partial(input_lineage, data),
                                                    spark=getattr(data, "sparkSession", None)))


def _explicit_plan(
    *, session, data, columns, mechanism, private, epsilon, delta, k, restarts, iterations, calibration, whiten,
    rows_per_round, entry_scale, privacy_unit, max_rows_per_unit, dataset_path, common, params, rng, neighbors,
    release_id, config_sha256, norm_bound, nonfinite, source_paths, worker_cache_bytes, clear_worker_cache,
    dimension, mode, bounds, **_unused
) -> ReleasePlan:
    """The release plan on an explicit tensor (``tensor_entry`` neighbours; Alg. 1, Alg. 3, input perturbation)."""
    if whiten:
        raise ConfigError(f"The 'whiten' parameter of {OWNER} needs rows (a DataFrame): an explicit tensor has no "
                          "second moment to whiten with. Got True instead.")
    if rows_per_round is not None:
        raise ConfigError(f"The 'rows_per_round' parameter of {OWNER} applies to rows only. Got {rows_per_round} "
                          "for an explicit tensor instead.")
    # An explicit tensor has no rows, hence no units to bound: refuse rather than ignore.
    if privacy_unit is not None:
        raise ConfigError(f"The 'privacy_unit' parameter of {OWNER} applies to rows (a DataFrame) only; an explicit "
                          f"tensor's neighbours are 'tensor_entry'. Got {privacy_unit!r} instead.")
    if max_rows_per_unit != 1:
        raise ConfigError(f"The 'max_rows_per_unit' parameter of {OWNER} applies to rows (a DataFrame) only. "
                          f"Got {max_rows_per_unit!r} for an explicit tensor instead.")
    if bounds is not None:
        raise ConfigError(f"The 'bounds' parameter of {OWNER} applies to the numeric columns of rows (a DataFrame) "
                          "only; an explicit tensor's entries are bounded by 'entry_scale'.")
    if norm_bound == "auto":
        raise ConfigError(f"The 'norm_bound' parameter of {OWNER} applies to rows (a DataFrame) only; an explicit "
                          "tensor's entries are bounded by 'entry_scale'. Got 'auto' instead.")
    if isinstance(data, str | os.PathLike):
        dataset_path = dataset_path or os.fspath(data)
        common["dataset_path"] = dataset_path
        data = load_tensor(os.fspath(data))
    T = check_tensor(data, owner=OWNER)
    d = T.shape[0]
    k, L, R = check_counts(k, restarts, iterations, d, owner=OWNER, names=("restarts", "iterations"))
    params = {**params, "entry_scale": entry_scale}
    request = {**common, "dimension": d, "params": params}
    extra = {"params": params, "dimension": d}
    on = on_input(mechanism, explicit=True)  # the registry entry (tensor.mechanisms.REGISTRY)
    req = TensorRequest(epsilon=epsilon, delta=delta, k=k, L=L, R=R, calibration=calibration, entry_scale=entry_scale,
                        neighbors=neighbors)
    if on.plan is None:
        return _public_plan(session, release_id, request, extra, mechanism,
                            lambda: on.run(T, req, None, None, rng), config_sha256)
    plan = on.plan(req)

    def noise(T_: np.ndarray, cp: Chokepoint) -> Noised:
        return _noised(on, on.run(T_, req, plan, cp, rng), req, plan, request)

    return _private_plan(session, plan, release_id, request, extra, mechanism, lambda: T, noise,
                         on.privacy(plan, req), neighbors, epsilon, delta, config_sha256)


def _rows_plan(
    *, session, data, columns, mechanism, private, epsilon, delta, k, restarts, iterations, calibration, whiten,
    rows_per_round, entry_scale, privacy_unit, max_rows_per_unit, dataset_path, common, params, rng, neighbors,
    release_id, config_sha256, norm_bound, nonfinite, source_paths, worker_cache_bytes, clear_worker_cache,
    dimension, mode, bounds, bounds_share, norm_bound_share, norm_bound_quantile, **_unused
) -> ReleasePlan:
    """The release plan on DataFrame rows (Alg. 2 / Alg. 3 over rows; whitened with ``whiten``)."""
    from spark_dp.aggregates.moments import third_moment_sums

    if columns is None:
        raise ConfigError(f"The 'columns' parameter of {OWNER} is required for rows (a DataFrame).")
    bounds = P.check("bounds", bounds, owner=OWNER)
    for name, value in (("bounds", bounds), ("norm_bound", norm_bound)):
        if value == "auto" and not private:
            raise ConfigError(f"The '{name}' parameter of {OWNER} may be 'auto' (chosen privately from the data at a "
                              f"share of epsilon) with a private mechanism only; {mechanism!r} is not private. "
                              "Give a number or public bounds instead.")
    if norm_bound != "auto" and (norm_bound is not None or bounds is None):
        norm_bound = P.check("norm_bound", norm_bound, owner=OWNER)
    P.check("nonfinite", nonfinite, owner=OWNER)
    P.check("privacy_unit", privacy_unit, owner=OWNER)
    max_rows_per_unit = P.check("max_rows_per_unit", max_rows_per_unit, owner=OWNER)
    columns = list(columns) if not isinstance(columns, str) else columns
    if source_paths is not None and (isinstance(source_paths, str) or not all(isinstance(p, str) for p in source_paths)):
        raise ConfigError(f"The 'source_paths' parameter of {OWNER} must be a list of paths. Got {source_paths!r} instead.")
    if worker_cache_bytes is not None:
        worker_cache_bytes = TENSOR_PARAMS.check("worker_cache_bytes", worker_cache_bytes, owner=OWNER)
    TENSOR_PARAMS.check("clear_worker_cache", clear_worker_cache, owner=OWNER)
    vec = _vector(data, columns, dimension, bounds, norm_bound, max_rows_per_unit, neighbors, epsilon=epsilon or 0.0,
                  bounds_share=bounds_share, share=norm_bound_share, quantile=norm_bound_quantile,
                  auto_offered=private)  # schema, no job
    auto = _Auto.of(vec, data, nonfinite=nonfinite, dimension=dimension, privacy_unit=privacy_unit,
                    max_rows_per_unit=max_rows_per_unit)
    # With norm_bound="auto" the events are planned at B = 1 (σ/Δ does not depend on B) and the plan at the chosen B.
    d, norm_bound = vec.size, (1.0 if vec.quantile is not None else float(vec.norm_bound))
    affine = vec.affine(norm_bound)
    k, L, R = check_counts(k, restarts, iterations, d, owner=OWNER, names=("restarts", "iterations"))
    eigen_pass = private
    passes = k * passes_per_component(R, eigen_pass) if mode == "fresh" else None
    params = {**params, "mode": mode, "rows_per_round": rows_per_round}
    request = {**common, "columns": columns, "dimension": d, "params": params,
               "norm_bound": norm_bound if vec.quantile is None else "auto",
               "nonfinite": nonfinite, "privacy_unit": privacy_unit, "max_rows_per_unit": max_rows_per_unit,
               # only when given, so a request without bounds keeps its digest (and release id)
               **({"bounds": {c: list(b) for c, b in vec.bounds.items()}} if vec.bounds and auto is None else {}),
               **({} if auto is None else auto.request(epsilon))}
    extra = {"columns": columns, "params": params, "dimension": d, **_scaling_manifest(vec), "policies": {
        "nonfinite": nonfinite_policy(nonfinite, vec.bounds is not None),
        "clipping": (f"rows scaled to L2 norm <= {norm_bound:g}" if vec.quantile is None else
                     "rows scaled to L2 norm <= B, B chosen privately (norm_bound_auto)"),
        "passes": "each row assigned to one pass by pmod(xxhash64(seed, row), passes)" if mode == "fresh"
                  else "every pass reads all rows",
        "null_privacy_unit": "rows with a null unit form one unit" if privacy_unit else None,
    }}
    if vec.auto_bounds is not None:
        extra["scaling"]["bounds"] = "auto: chosen privately, see bounds_auto"
    source = _RowsSource(data, columns, dimension=dimension, privacy_unit=privacy_unit,
                         max_rows_per_unit=max_rows_per_unit, passes=None, mode=mode, source_paths=source_paths,
                         cache_bytes=worker_cache_bytes, clear_cache=clear_worker_cache, affine=affine,
                         nonfinite=nonfinite, norm_bound=norm_bound)
    on = on_input(mechanism, explicit=False)  # the registry entry (tensor.mechanisms.REGISTRY)
    req = TensorRequest(epsilon=epsilon if auto is None else mechanism_budget(vec, epsilon), delta=delta, k=k, L=L,
                        R=R, calibration=calibration, norm_bound=norm_bound, mode=mode, neighbors=neighbors,
                        max_rows_per_unit=max_rows_per_unit, whiten=whiten, rows_per_round=rows_per_round)
    scales = vec.scaling(norm_bound).scales() if vec.bounds else None
    if whiten:
        return _whitened_plan(session, source, on, req, release_id=release_id, request=request, extra=extra,
                              mechanism=mechanism, d=d, nonfinite=nonfinite, rng=rng, config_sha256=config_sha256,
                              scales=scales, auto=auto)
    if on.plan is not None:
        plan = on.plan(req)
    source.passes, source.session = passes, session
    prepare = source.prepare

    def moments_of(frame: DataFrame, norm_bound: float = norm_bound):
        def moments(U: np.ndarray, pass_index: int):
            return third_moment_sums(frame, U, norm_bound=norm_bound, nonfinite=nonfinite,
                                     pass_index=pass_index if mode == "fresh" else None)
        return moments

    if on.plan is None:
        def run() -> TensorDecomposition:
            frame = prepare()
            try:
                return on.run(moments_of(frame), d, req, None, None, rng)
            finally:
                source.release(frame)
        return _public_plan(session, release_id, request, extra, mechanism, run, config_sha256,
                            payload=lambda dec: with_directions(Noised(_payload(dec)), scales).arrays)

    def noise(frame: DataFrame | None, cp: Chokepoint) -> Noised:
        # The passes are adaptive (each depends on the previous noisy output), so
        # the Spark work runs here, after the charge; a crash mid-way costs budget
        # but releases nothing. With 'auto' the rows are first read here for the choice (its event charged).
        B, req_b, plan_b, scales_b, more = norm_bound, req, plan, scales, {}
        if auto is not None:
            B, scales_b, more = auto.choose(cp, source)
            req_b, plan_b = auto.replan(on, req, plan, B, more)
            frame = prepare()
        assert frame is not None
        try:
            dec = on.run(moments_of(frame, B), d, req_b, plan_b, cp, rng)
        finally:
            source.release(frame)
        noised = with_directions(_noised(on, dec, req_b, plan_b, request), scales_b)
        return dataclasses.replace(noised, manifest={**noised.manifest, **more})

    privacy = {**on.privacy(plan, req), "norm_bound": norm_bound, "privacy_unit": privacy_unit or "row",
               "privacy_unit_column": privacy_unit,
               "max_rows_per_unit": max_rows_per_unit}
    return _private_plan(session, plan, release_id, request, extra, mechanism, prepare if auto is None else _nothing,
                         noise, privacy, neighbors, epsilon, delta, config_sha256, auto=auto, on=on, req=req)


def _nothing() -> None:
    """The exact step of an ``auto`` release: none before the charge (the rows are first read after it)."""
    return None


class _Auto:
    """``bounds="auto"`` or ``norm_bound="auto"`` over rows: the private choice, made after the charge.

    The choice is the second-moment family's (:mod:`spark_dp.privacy.quantile`,
    planned by :func:`spark_dp.second_moment._prepare.vector`): its event is
    charged with the release's others, its counts are read after the charge,
    and the draw goes through the chokepoint. The mechanism is planned at the
    remaining ε (:func:`~spark_dp.second_moment._prepare.mechanism_budget`).
    """

    def __init__(self, vec, data, *, nonfinite, dimension, privacy_unit, max_rows_per_unit) -> None:
        self.vec, self.data, self.nonfinite, self.dimension = vec, data, nonfinite, dimension
        self.privacy_unit, self.max_rows_per_unit = privacy_unit, max_rows_per_unit

    @classmethod
    def of(cls, vec, data, **kw) -> _Auto | None:
        return None if vec.auto_bounds is None and vec.quantile is None else cls(vec, data, **kw)

    @property
    def event(self):
        return (self.vec.auto_bounds or self.vec.quantile).event

    def request(self, epsilon: float) -> dict:
        """The request's fields of the choice (as the second-moment family's ``Prepared.request``)."""
        vec = self.vec
        if vec.auto_bounds is not None:
            return {"bounds": "auto", "bounds_auto": {"share": vec.auto_bounds.epsilon / epsilon}}
        return {"norm_bound_auto": {"share": vec.quantile.epsilon / epsilon, "quantile": vec.quantile.alpha}}

    def privacy(self, epsilon: float) -> dict:
        """The budget split, stated in the manifest's privacy block."""
        vec = self.vec
        return {"epsilon": epsilon, "mechanism_epsilon": mechanism_budget(vec, epsilon),
                **({"bounds_epsilon": vec.auto_bounds.epsilon} if vec.auto_bounds is not None else
                   {"norm_bound_epsilon": vec.quantile.epsilon})}

    def choose(self, cp: Chokepoint, source: _RowsSource) -> tuple[float, np.ndarray | None, dict]:
        """Reads the counts, draws the choice through ``cp`` (its charged event) and sets ``source`` to it.

        Returns the norm bound B, the scales of ``directions`` (None without bounds) and the manifest's fields.
        """
        from spark_dp.aggregates.norms import norm_counts, value_counts
        from spark_dp.privacy.quantile import (
            VALUE_GRID,
            collapse_warning,
            collapsed_columns,
            private_bounds,
            private_quantile,
        )

        vec = self.vec
        if vec.auto_bounds is not None:
            counts = value_counts(self.data, vec.names, VALUE_GRID, privacy_unit=self.privacy_unit,
                                  max_rows_per_unit=self.max_rows_per_unit)
            chosen = private_bounds(cp, vec.auto_bounds, counts)
            collapsed = collapsed_columns(chosen)
            warning = {} if not collapsed else {"warning": collapse_warning(vec.auto_bounds, collapsed)}
            if collapsed:
                log.warning("%s", warning["warning"])
            B, chosen_vec = float(vec.norm_bound), vec.with_bounds(chosen)
            source.affine = chosen_vec.affine(B)
            return B, chosen_vec.scaling(B).scales(), {**_scaling_manifest(chosen_vec), "bounds_auto": {
                **vec.auto_bounds.manifest(), "bounds": {c: list(b) for c, b in chosen.items()}, **warning}}
        grid = vec.grid()
        counts = norm_counts(self.data, vec.columns, grid, nonfinite=self.nonfinite, dimension=self.dimension,
                             privacy_unit=self.privacy_unit, max_rows_per_unit=self.max_rows_per_unit,
                             affine=vec.affine(None))
        q = private_quantile(cp, vec.quantile, counts, grid)
        B = vec.bound_from_quantile(q)
        source.norm_bound = B
        return B, (vec.scaling(B).scales() if vec.bounds else None), {"norm_bound_auto": {
            **vec.quantile.manifest(), **({"grid": "2^(j/4) in [sqrt(d)/256, sqrt(d)], and sqrt(d) (every column "
                                          "bounded: no row norm exceeds sqrt(d))"} if vec.fully_bounded else {}),
            "selected_quantile": q, "norm_bound": B}}

    def replan(self, on, req: TensorRequest, plan, B: float, more: dict):
        """The request and plan at the chosen B (the same events: σ/Δ does not depend on B); states σ, Δ at B."""
        if self.vec.quantile is None:
            return req, plan
        req_b = dataclasses.replace(req, norm_bound=B)
        plan_b = on.plan(req_b)
        if list(plan_b.events) != list(plan.events):
            raise RuntimeError("bug: the mechanism's events changed with the chosen norm bound")
        stated = on.privacy(plan_b, req_b)
        more["norm_bound_auto"].update({k: stated[k] for k in ("sensitivity", "noise_scale", "noise_sigma",
                                                                "second_moment_sigma") if k in stated})
        return req_b, plan_b


class _RowsSource:
    """Where the passes read the rows: a cached vectorised frame, or Parquet files read by the tasks.

    Plain Parquet files (``source_paths``, or detected from the frame:
    :mod:`spark_dp.aggregates._scan`) are read in the tasks with the worker
    block cache, in both modes: ``fresh`` mode's tasks give each row the
    pass Spark's ``prepare_rows`` would (:mod:`spark_dp.aggregates._fresh`).
    Everything else (privacy units, public ``bounds`` (``affine``: clamped and
    scaled in the Spark expression), other sources, an array column with
    ``nonfinite="zero"`` in fresh mode) caches the vectorised frame.
    """

    def __init__(self, data, columns, *, dimension, privacy_unit, max_rows_per_unit, passes, mode, source_paths,
                 cache_bytes, clear_cache, affine=None, nonfinite="drop", norm_bound=1.0) -> None:
        self.affine = affine
        self.data, self.columns, self.dimension = data, columns, dimension
        self.privacy_unit, self.max_rows_per_unit = privacy_unit, max_rows_per_unit
        self.passes, self.mode, self.nonfinite, self.norm_bound = passes, mode, nonfinite, norm_bound
        self.session = None  # whose sampler draws fresh mode's secret pass seed, in prepare (after the checks)
        self.source_paths, self.cache_bytes, self.clear_cache = source_paths, cache_bytes, clear_cache

    def prepare(self):
        from spark_dp.aggregates._scan import choose_source_paths
        from spark_dp.aggregates.moments import parquet_rows, prepare_rows

        # Drawn here, when the rows are read (after the stored-release and budget checks), and only if used:
        # a re-run or a refused request draws nothing from the sampler.
        seed = pass_seed(self.session) if self.passes is not None else 0
        # Given, or detected when the data is a plain Parquet scan (aggregates/_scan.py).
        paths = None if self.affine is not None else choose_source_paths(
            self.data, self.columns, self.source_paths, owner=OWNER,
            unsupported="privacy_unit needs a shuffle" if self.privacy_unit else None)
        if paths:
            kw = {} if self.cache_bytes is None else {"cache_bytes": self.cache_bytes}
            rows = parquet_rows(paths, self.columns, dimension=self.dimension,
                                privacy_unit=self.privacy_unit, spark=self.data.sparkSession, **kw)
            if rows is not None and self.passes is not None and rows.layout == "list" and self.nonfinite == "zero":
                # Spark's hash skips an array's null elements, which the tasks read as NaN (aggregates/_fresh.py).
                log.info("%s: Spark reader path (fresh mode over an array column with nonfinite='zero')", OWNER)
                rows = None
            if rows is not None:
                if self.passes is not None:
                    rows.assign_passes(self.passes, seed, prefill=(self.norm_bound, self.nonfinite))
                return rows
        return prepare_rows(self.data, self.columns, dimension=self.dimension, privacy_unit=self.privacy_unit,
                            max_rows_per_unit=self.max_rows_per_unit, passes=self.passes, seed=seed,
                            affine=self.affine)[0]

    def release(self, frame) -> None:
        from spark_dp.aggregates.moments import ParquetRows, clear_worker_cache

        frame.unpersist()
        if self.clear_cache and isinstance(frame, ParquetRows) and frame.tasks:
            clear_worker_cache(frame.spark, frame.uris)


def _whitened_plan(session, source, on, req, *, release_id, request, extra, mechanism, d, nonfinite, rng,
                   config_sha256, scales=None, auto=None) -> ReleasePlan:
    """Whitened decomposition over rows (see :mod:`spark_dp.tensor.whiten`), by the mechanism's ``run_whitened``."""
    from spark_dp.aggregates.moments import second_moment_sums, third_moment_sums

    if on.run_whitened is None:
        raise ConfigError(f"The 'whiten' parameter of {OWNER} is not supported by mechanism {mechanism!r}.")
    private, norm_bound, mode = on.plan is not None, req.norm_bound, req.mode
    source.passes = req.k * passes_per_component(req.R, private) if mode == "fresh" else None
    source.session = session
    if private:
        plan = on.plan(req)
    prepare = source.prepare

    def moments_of(frame, norm_bound=norm_bound):
        return lambda U, p: third_moment_sums(frame, U, norm_bound=norm_bound, nonfinite=nonfinite,
                                              pass_index=p if mode == "fresh" else None)

    def payload(w) -> dict[str, np.ndarray]:
        return {"eigenvalues": w.eigenvalues, "eigenvectors": w.eigenvectors, "components": w.components,
                "weights": w.weights}

    if not private:
        def run():
            frame = prepare()
            try:
                M2, n = second_moment_sums(frame, d, norm_bound=norm_bound, nonfinite=nonfinite)
                return on.run_whitened(moments_of(frame), M2, n, req, None, None, rng)
            finally:
                source.release(frame)
        return _public_plan(session, release_id, request, extra, mechanism, run, config_sha256,
                            payload=lambda w: with_directions(Noised(payload(w)), scales).arrays)

    def compute(norm_bound=norm_bound):
        frame = prepare()
        return frame, second_moment_sums(frame, d, norm_bound=norm_bound, nonfinite=nonfinite)[0]

    def noise(exact, cp: Chokepoint) -> Noised:
        B, req_b, plan_b, scales_b, more = norm_bound, req, plan, scales, {}
        if auto is not None:  # the rows are first read here, after the charge (_Auto)
            B, scales_b, more = auto.choose(cp, source)
            req_b, plan_b = auto.replan(on, req, plan, B, more)
            exact = compute(B)
        frame, gram = exact
        try:
            w = on.run_whitened(moments_of(frame, B), gram, None, req_b, plan_b, cp, rng)
            noised = with_directions(Noised(payload(w), uncertainty=on.uncertainty(w, req_b, plan_b,
                                                                                    confidence_of(request))), scales_b)
            return dataclasses.replace(noised, manifest={**noised.manifest, **more})
        finally:
            source.release(frame)

    privacy = {**on.privacy(plan, req), "norm_bound": norm_bound, "privacy_unit": source.privacy_unit or "row",
               "privacy_unit_column": source.privacy_unit,
               "max_rows_per_unit": req.max_rows_per_unit, "whiten": True}
    return _private_plan(session, plan, release_id, request, extra, mechanism, compute if auto is None else _nothing,
                         noise, privacy, req.neighbors, request["epsilon"], req.delta, config_sha256, auto=auto, on=on,
                         req=req)


def _vector(data, columns, dimension, bounds, norm_bound, max_rows_per_unit, neighbors, *, epsilon, bounds_share,
            share, quantile, auto_offered):
    """The rows' vector as the second-moment family defines it (``_prepare.vector``: bounds against the schema,
    B = √d when every column is bounded, the plans of ``bounds="auto"`` / ``norm_bound="auto"`` at ε's shares),
    without its constant column (a third moment has none: ``directions``).
    """
    from spark_dp.second_moment._prepare import vector

    return vector(OWNER, data, columns, dimension, bounds=bounds, norm_bound=norm_bound, constant_at=None,
                  epsilon=epsilon, share=share, quantile=quantile, max_rows_per_unit=max_rows_per_unit,
                  neighbors=neighbors, bounds_share=bounds_share, norm_bound_auto=auto_offered)


def _scaling_manifest(vec) -> dict:
    """The manifest's ``scaling`` with bounds: the map, and which arrays are in which units."""
    if not vec.bounds:
        return {}
    return {"scaling": vec.scaling(1.0).manifest(results=(
        "eigenvalues (and their intervals), eigenvectors, components and weights: of the third moment of the scaled "
        "rows a = (clamp(x) - c)/h (centred at the bounds' midpoints c); directions = vectors * h (per column): "
        "sum (clamp(x) - c)^3 ~ sum_i lambda_i directions_i^3 in the data's units (exact post-processing: the "
        "diagonal scaling; the shift c is not undone, as that needs the first and second moments)"))}


def with_directions(noised: Noised, scales: np.ndarray | None) -> Noised:
    """With bounds: adds ``directions`` = the released vectors · diag(h), in the data's units (exact post-processing).

    The vectors are ``components`` when whitened, else ``eigenvectors``
    (unit vectors, whose trivial bound [−1, 1] becomes [−hⱼ, hⱼ]; the whitened
    components have no finite bound, nor then have their directions).
    """
    if scales is None:
        return noised
    from spark_dp.release.uncertainty import Uncertainty
    from spark_dp.tensor.private import NO_VECTOR_BOUND

    source = "components" if "components" in noised.arrays else "eigenvectors"
    directions = np.asarray(noised.arrays[source], dtype=np.float64) * scales
    unc = dict(noised.uncertainty)
    if source == "eigenvectors" and source in unc:
        h = np.broadcast_to(scales, directions.shape)
        unc["directions"] = Uncertainty(-h, h.copy(), None, NO_VECTOR_BOUND + "; directions = eigenvectors * h, so "
                                        "entry j lies in [-h_j, h_j]", kind="bound")
    return dataclasses.replace(noised, arrays={**noised.arrays, "directions": directions}, uncertainty=unc)


def _private_plan(session, plan, release_id, request, extra, mechanism, compute, noise, privacy, neighbors,
                     epsilon, delta, config_sha256, *, auto=None, on=None, req=None) -> ReleasePlan:
    """The private release's plan; ``epsilon`` is the release's (with ``auto``: the choice's share and the
    mechanism's, ``plan`` being the mechanism's at the rest and, with ``norm_bound="auto"``, at B = 1).
    """
    events = ((auto.event,) if auto is not None else ()) + tuple(plan.events)
    accounted = compose_epsilon(list(events), delta)  # once: the events do not depend on B (norm_bound="auto")

    def stated(plan, privacy) -> dict:
        return {
            "epsilon": epsilon, "delta": delta, "neighbors": neighbors, **privacy,
            "calibration": plan.calibration if plan.calibration == "paper" else "exact (Balle & Wang 2018)",
            "noise_multiplier": plan.noise_multiplier, "releases": plan.releases, "composition": plan.composition,
            "composition_note": ("each row is used in exactly one power pass: the passes compose in parallel"
                                 + (" (after the second moment, sequentially)" if plan.releases == 2 and
                                    plan.details.get("second_moment_sensitivity") else "")
                                 if plan.composition == "parallel" else
                                 "the releases compose sequentially (exact Gaussian composition)"),
            "epsilon_exact_accounting": accounted,
            **{f"calibration_{k}": v for k, v in plan.details.items()},
        }

    stated_privacy = stated(plan, privacy)
    if auto is not None and auto.vec.quantile is not None:
        # norm_bound="auto": the B-dependent numbers (σ, Δ) are stated after the choice (manifest's norm_bound_auto)
        def at(B: float):
            req_b = dataclasses.replace(req, norm_bound=B)
            plan_b = on.plan(req_b)
            return types.SimpleNamespace(privacy=stated(plan_b, {**privacy, **on.privacy(plan_b, req_b)}))

        stated_privacy = auto_privacy(at, epsilon, auto.vec)
    elif auto is not None:
        stated_privacy = {**stated_privacy, **auto.privacy(epsilon)}
    return ReleasePlan(
        task="tensor_decomposition", mechanism=mechanism, release_id=release_id, request=request,
        events=events, budget=Budget(epsilon, delta), compute=compute,
        noise=lambda exact, cp: _as_noised(noise(exact, cp)), privacy=stated_privacy, manifest=extra,
        config_sha256=config_sha256,
    )


def _noised(on, dec: TensorDecomposition, req, plan, request) -> Noised:
    """The payload of a decomposition with the error bars its mechanism states (registry ``uncertainty``)."""
    unc = {} if on.uncertainty is None else on.uncertainty(dec, req, plan, confidence_of(request))
    return Noised(_payload(dec), uncertainty=unc)


def _as_noised(out) -> Noised:
    """A noise step's result as a Noised (steps with error bars return one, the others their arrays)."""
    return out if isinstance(out, Noised) else Noised(out)


def _check_nonprivate_opt_in(session: DPSession, mechanism: str, private: bool | None) -> None:
    """Exact results from the session's data need ``private=False`` and a dataset without a budget."""
    if private is not False:
        raise ConfigError(
            f"The 'mechanism' {mechanism!r} of {OWNER} is NOT differentially private: on rows it releases exact "
            "results computed from the data. Pass private=False (configs: 'privacy: {mode: none}') to run it on "
            "public data, or use mechanism 'private_power_method'."
        )
    if (session.limit is not None or session.ledger.status(session.dataset_id)
            or session.ledger.lifetime_limit(session.dataset_id) is not None):
        raise ConfigError(
            f"Dataset {session.dataset_id!r} has a privacy budget (in the ledger or the session, per period or "
            "lifetime): a non-private "
            f"mechanism ({mechanism!r}, private=False) may not release exact results from it. Use a private "
            "mechanism, or a dataset id without a budget for public data."
        )


def _public_plan(session, release_id, request, extra, mechanism, run, config_sha256, payload=_payload) -> ReleasePlan:
    """A non-private release (public data, tests): nothing is charged; the manifest says so.

    On rows (``request`` has ``columns``) the pipeline's ``nonprivate`` mode:
    the release id starts with ``nonprivate-`` and the release is written
    under ``<output>/nonprivate/``.
    """
    on_rows = "columns" in request
    return ReleasePlan(
        task="tensor_decomposition", mechanism=mechanism, release_id=release_id, request=request, events=(),
        budget=None, privacy={} if on_rows else {"note": "Alg. 1 on an explicit, public tensor"}, manifest=extra,
        compute=run, noise=lambda result, _: Noised(payload(result)), config_sha256=config_sha256,
        mode="nonprivate" if on_rows else "public_input",
    )
