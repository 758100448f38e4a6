"""Release plans: recurring releases with explicit per-period budgets (``spark-dp plan run|status``)."""

from spark_dp.plans.plan import Plan, PlanEntry, load_plan, period_bounds, period_key, plan_from_dict
from spark_dp.plans.runner import (
                                   EntryResult,
                                   LifetimeForecast,
                                   PeriodStatus,
                                   plan_lifetimes,
                                   plan_status,
                                   run_config,
                                   run_merge,
                                   run_plan,
)

__all__ = [
    "EntryResult", "LifetimeForecast", "PeriodStatus", "Plan", "PlanEntry", "load_plan", "period_bounds", "period_key",
    "plan_from_dict", "plan_lifetimes", "plan_status", "run_config", "run_merge", "run_plan",
]
