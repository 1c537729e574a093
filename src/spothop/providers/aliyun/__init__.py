"""Alibaba Cloud ECS behind spothop's provider interface (extra ``aliyun``: alibabacloud-ecs20140526).

``FAMILY`` is what the registry finds (``get_provider("aliyun", **options)``);
importing this package does not import the SDK: creating a provider does, and
a missing SDK is a ConfigError naming the extra. See ``provider.py`` for what
each method asks of ECS and ``docs/providers-aliyun.md`` for the options.
"""

from __future__ import annotations

from spothop.providers.aliyun.provider import AliyunFamily, AliyunProvider

FAMILY = AliyunFamily()

__all__ = ["FAMILY", "AliyunFamily", "AliyunProvider"]
