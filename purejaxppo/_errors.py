"""The one form of a refused config value, shared by the config and the env registry."""

from __future__ import annotations

from typing import NoReturn


def invalid(field: str, value, fix: str) -> NoReturn:
    """Refuse ``PPOConfig.<field>=value`` in one line that names the field and the fix."""
    raise ValueError(f"PPOConfig.{field}={value!r} is invalid: {fix}")


def one_line(e: BaseException) -> str:
    """An exception as ``Type: first line``, for a refusal that quotes what went wrong."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
