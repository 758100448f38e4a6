"""Reports of releases (``spark-dp report``): Markdown/HTML with matplotlib plots; post-processing only."""

from spark_dp.report.report import Report, privacy_summary, write_report

__all__ = ["Report", "privacy_summary", "write_report"]
