"""What every settings group shares: the ``CONDUIT_`` prefix, plain aliases and checked types."""

from __future__ import annotations

from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, AliasChoices
from pydantic_settings import SettingsConfigDict

CONFIG = SettingsConfigDict(env_prefix="CONDUIT_", extra="ignore", populate_by_name=True)
"""Each group reads ``CONDUIT_<FIELD>`` (field names are unique across groups, so the names are those of the
one flat ``Settings`` they replace); unknown variables are ignored."""


def alias(name: str, *plain: str) -> AliasChoices:
    """``CONDUIT_<NAME>`` or any of the ``plain`` names (e.g. ``REDIS_URL``), in that order."""
    return AliasChoices(f"CONDUIT_{name.upper()}", *plain)


def time_zone_name(name: str) -> str:
    """``name`` when it is an IANA time zone (``Asia/Shanghai``); raises ``ValueError`` naming it otherwise."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}: use an IANA name such as Asia/Shanghai") from exc
    return name


TimeZoneName = Annotated[str, AfterValidator(time_zone_name)]
"""An IANA time zone name, checked when read."""
