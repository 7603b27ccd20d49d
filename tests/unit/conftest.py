"""Fixtures the unit tests share."""

from tests.unit.model_bucket import s3

__all__ = ["s3"]
