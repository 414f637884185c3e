"""The README's Python examples, run as written, in order, in one namespace.

One substitution, so that the examples run in under a minute here: the first block's config
(the medium maze's 819,200 steps) becomes the same maze with 2 small updates. Everything
else (the sweep of 96 agents with its run directory, PBT's 64 agents, evaluation, loading a
policy from the sweep's run directory) runs exactly as the README prints it.
"""

import re
import warnings
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

README = Path(__file__).parent.parent / "README.md"
AS_WRITTEN = 'PPOConfig(maze="medium", total_timesteps=819_200)'
SMALLER = (
    'PPOConfig(maze="medium", num_envs=4, num_steps=32, minibatch_size=32, update_epochs=1, '
    "total_timesteps=256)"
)


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_python_examples_run_as_written(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 4 and AS_WRITTEN in blocks[0]
    monkeypatch.chdir(tmp_path)  # the examples write runs/my-sweep
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PBT's interval is longer than 2 updates: it says so
        for i, block in enumerate(blocks):
            code = block.replace(AS_WRITTEN, SMALLER) if i == 0 else block
            exec(compile(code, f"README.md python block {i + 1}", "exec"), namespace)
    # What the examples promise, checked on what they made.
    assert namespace["metrics"].episode_return.shape == (64, 2)
    assert (tmp_path / "runs" / "my-sweep" / "params.eqx").exists()
    assert namespace["action"].shape == ()
