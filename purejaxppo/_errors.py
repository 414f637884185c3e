"""The one form of a refused config value, shared by the config and the env registry."""

from __future__ import annotations

from typing import NoReturn


def invalid(field: str, value, fix: str) -> NoReturn:
    """Refuse ``PPOConfig.<field>=value`` in one line that names the field and the fix."""
    raise ValueError(f"PPOConfig.{field}={value!r} is invalid: {fix}")
