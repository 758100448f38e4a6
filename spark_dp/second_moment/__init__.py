"""Private second-moment matrix mechanisms (Sheffet; Dwork et al.; Wang) with regression and PCA."""

from spark_dp.privacy.chi2_profile import calibrate_a_max, delta_for_epsilon
from spark_dp.second_moment.adassp import AdaSSPPlan, adassp, adassp_plan
from spark_dp.second_moment.analyze_gauss import POSTPROCESS, analyze_gauss, analyze_gauss_plan, postprocess_matrix
from spark_dp.second_moment.inverse_wishart import inverse_wishart, inverse_wishart_plan
from spark_dp.second_moment.jl_ridge import jl_ridge, jl_ridge_from_gram, jl_ridge_plan
from spark_dp.second_moment.pca import principal_components
from spark_dp.second_moment.regression import regression_coefficients, solve_normal_equations
from spark_dp.second_moment.wishart import additive_wishart, wishart_min_dof, wishart_plan

__all__ = [
    "POSTPROCESS",
    "AdaSSPPlan",
    "adassp",
    "adassp_plan",
    "additive_wishart",
    "analyze_gauss",
    "analyze_gauss_plan",
    "calibrate_a_max",
    "delta_for_epsilon",
    "inverse_wishart",
    "inverse_wishart_plan",
    "jl_ridge",
    "jl_ridge_from_gram",
    "jl_ridge_plan",
    "postprocess_matrix",
    "principal_components",
    "regression_coefficients",
    "solve_normal_equations",
    "wishart_min_dof",
    "wishart_plan",
]
