"""Private second-moment matrix mechanisms (Sheffet; Dwork et al.)."""

from spark_dp.second_moment.analyze_gauss import POSTPROCESS, analyze_gauss, analyze_gauss_plan, postprocess_matrix

__all__ = ["POSTPROCESS", "analyze_gauss", "analyze_gauss_plan", "postprocess_matrix"]
