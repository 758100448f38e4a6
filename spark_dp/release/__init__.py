"""Release layer: payload + metadata, writers, loading."""

from spark_dp.release.release import MANIFEST_SCHEMA_VERSION, Release, load_release, release_exists, write_release
from spark_dp.release.table import write_release_table

__all__ = ["MANIFEST_SCHEMA_VERSION", "Release", "load_release", "release_exists", "write_release",
           "write_release_table"]
