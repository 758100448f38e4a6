"""Command line, job configs and spark-submit entry points."""
