"""Config values from a ``--config`` YAML/JSON file (a run's ``config.json`` too), and the
`PPOConfig` a command's flags describe."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .._config import PPOConfig
from ._flags import ConfigFlags


def file_defaults(argv: list[str]) -> dict:
    """Config-file values (``--config FILE``), checked against the PPOConfig fields."""
    if "--config" not in argv:
        return {}
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise ValueError("--config needs a file path.")
    path = Path(argv[i + 1])
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--config {path}: cannot read it ({e}).") from e
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1}" if where is not None else ""
            raise ValueError(f"--config {path}: not valid YAML{at}; fix the file.") from e
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"--config {path}: not valid JSON (line {e.lineno}: {e.msg}); fix the file."
            ) from e
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of config fields.")
    per_agent = ("seed", "agent")  # a config file's values serve every seed (every PBT agent)
    swept = [k for k, v in (data.get("axes") or {}).items() if k not in per_agent and len(v) > 1]
    if swept:
        raise ValueError(
            f"--config {path}: this run swept {swept}, and a config file holds one value per "
            'field, so those values would be lost; copy its "config" section to a new file '
            "and set the fields you want (or repeat the sweep with --sweep.<field>)."
        )
    data = data.get("config", data)  # a run directory's config.json works too
    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"--config {path}: unknown fields {unknown}; fields are {sorted(fields)}.")
    out = {}
    for k, v in data.items():
        if isinstance(v, list):
            v = "\n".join(v) if k == "maze" else tuple(v)
        out[k] = v
    return out  # validated with the flags merged in (a flag may fix a file's value)


def config_of(cmd) -> PPOConfig:
    values = {f.name: getattr(cmd, f.name) for f in dataclasses.fields(ConfigFlags)}
    if isinstance(values["maze"], str) and "\n" in values["maze"]:
        values["maze"] = tuple(values["maze"].split("\n"))
    return PPOConfig(**values)
