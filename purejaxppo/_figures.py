"""Figures of a run: learning curves with bootstrap bands, and a GIF of an agent playing.

Both are written offline: matplotlib's Agg backend for the PNG, and Pillow as the GIF writer
(Jumanji's ``animate`` saves with matplotlib's default writer, ffmpeg, which a fresh machine
usually lacks; we set the writer to Pillow for that call).
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
from jaxtyping import Float, PRNGKeyArray

from ._config import PPOConfig
from ._evaluate import Policy


def curve_band(
    returns: Float[np.ndarray, "S U"],
    confidence: float = 0.95,
    num_resamples: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds per update and its percentile-bootstrap band (resampling seeds).

    NaN entries (updates in which a seed finished no episode) are left out of that update's
    mean. Returns ``(mean, low, high)``, each of shape ``(U,)``.
    """
    returns = np.asarray(returns, np.float64)
    with np.errstate(invalid="ignore"), _quiet():
        mean = np.nanmean(returns, axis=0)
        if returns.shape[0] < 2:
            return mean, mean, mean
        rng = np.random.default_rng(seed)
        index = rng.integers(0, returns.shape[0], size=(num_resamples, returns.shape[0]))
        boot = np.nanmean(returns[index], axis=1)  # (B, U)
        alpha = (1 - confidence) / 2
        low, high = np.nanquantile(boot, [alpha, 1 - alpha], axis=0)
    return mean, low, high


def plot_curves(
    path: Path,
    curves: dict[str, np.ndarray],
    env_steps: np.ndarray | dict[str, np.ndarray],
    title: str,
):
    """One line per setting (label → (seeds, updates) returns), mean ± 95 % bootstrap band.

    ``env_steps``: the x values, one array for all lines or one per label (static settings
    such as ``num_envs`` collect different steps per update; NaN past a line's end)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for label, returns in curves.items():
        mean, low, high = curve_band(returns)
        seeds = returns.shape[0]
        x = env_steps[label] if isinstance(env_steps, dict) else env_steps
        (line,) = ax.plot(x, mean, label=f"{label} ({seeds} seeds)" if label else None)
        ax.fill_between(x, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    ax.set_xlabel("environment steps per agent")
    ax.set_ylabel("episode return")
    ax.set_title(title + " — mean over seeds, 95 % bootstrap CI", fontsize=9)
    ax.grid(alpha=0.3)
    if any(curves):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_gif(
    path: Path,
    cfg: PPOConfig,
    policy: Policy,
    key: PRNGKeyArray,
    interval_ms: int = 150,
    max_frames: int = 200,
) -> int:
    """Play one greedy episode with ``policy`` and save Jumanji's animation of it as a GIF.

    Returns the number of frames. Jumanji envs only (their own renderers, see `can_render`).
    Long episodes (Snake's limit is 4,000 steps) stop at ``max_frames``: rendering cost
    ~0.2 s per frame here.
    """
    import matplotlib

    matplotlib.use("Agg")
    from .envs import JumanjiEnv, JumanjiMaze, can_render, make_env

    if not can_render(cfg):
        raise ValueError(
            f"write_gif: no renderer for {cfg.env!r}, time_input={cfg.time_input}, "
            f"maze_visited={cfg.maze_visited}."
        )
    env = make_env(cfg)
    if cfg.env.startswith("brax/"):
        return _write_brax_gif(path, env, policy, interval_ms, max_frames, key)
    if isinstance(env, JumanjiMaze):
        mask, to_jumanji = (lambda obs: obs.action_mask), (lambda action: action)
    else:
        assert isinstance(env, JumanjiEnv), type(env)
        mask, to_jumanji = env.mask, env.env_action
    jumanji_env = env.env

    @jax.jit
    def step(policy, state, ts, hidden):  # a recurrent policy carries its memory
        action, hidden = policy.step(hidden, env.encode(ts.observation), mask(ts.observation))
        return *jumanji_env.step(state, to_jumanji(action)), hidden

    state, ts = jax.jit(jumanji_env.reset)(key)
    states, hidden = [state], policy.initial_hidden()
    for _ in range(min(env.max_episode_steps, max_frames - 1)):
        state, ts, hidden = step(policy, state, ts, hidden)
        states.append(state)
        if bool(ts.last()):
            break
    with matplotlib.rc_context({"animation.writer": "pillow"}):
        jumanji_env.animate(states, interval=interval_ms, save_path=str(path))
    import matplotlib.pyplot as plt

    plt.close("all")
    return len(states)


def _write_brax_gif(path: Path, env, policy: Policy, interval_ms: int, max_frames: int, key):
    """One greedy episode of a Brax env, drawn by Brax's own MuJoCo renderer
    (`brax.io.image.render_array`; offline, through EGL: see `envs._brax`)."""
    from brax.io import image
    from PIL import Image

    @jax.jit
    def step(policy, state, obs, mask, hidden):
        action, hidden = policy.step(hidden, obs, mask)
        return *env.step(state, action), hidden

    state, obs, mask = jax.jit(env.reset)(key)
    pipeline, hidden = [state.inner.pipeline_state], policy.initial_hidden()
    for _ in range(min(env.max_episode_steps, max_frames - 1)):
        nxt, out, hidden = step(policy, state, obs, mask, hidden)
        if bool(out.done):
            break
        state, obs, mask = nxt, out.obs, out.mask
        pipeline.append(state.inner.pipeline_state)
    frames = image.render_array(env.env.sys, pipeline, height=240, width=320)
    pictures = [Image.fromarray(f) for f in frames]
    pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=interval_ms, loop=0)
    return len(pictures)


class _quiet:
    """Silence numpy's all-NaN-slice warnings (an update where no episode ended)."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)
