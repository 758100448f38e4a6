"""Release layer: payload + metadata, writers, loading."""

from spark_dp.release.release import MANIFEST_SCHEMA_VERSION, Release, load_release, write_release

__all__ = ["MANIFEST_SCHEMA_VERSION", "Release", "load_release", "write_release"]
