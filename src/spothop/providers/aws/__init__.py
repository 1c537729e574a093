"""Amazon EC2 behind spothop's provider interface (extra ``aws``: boto3).

``FAMILY`` is what the registry finds (``get_provider("aws", **options)``);
importing this package does not import boto3: creating a provider does, and a
missing boto3 is a ConfigError naming the extra. See ``provider.py`` for what
each method asks of EC2 and ``docs/providers-aws.md`` for the options.
"""

from __future__ import annotations

from spothop.providers.aws.provider import AwsFamily, AwsProvider

FAMILY = AwsFamily()

__all__ = ["FAMILY", "AwsFamily", "AwsProvider"]
