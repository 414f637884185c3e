"""Figures of a run: learning curves with bootstrap bands, and a GIF of an agent playing.

Both are written offline: matplotlib's Agg backend for the PNG, and Pillow as the GIF writer
(Jumanji's ``animate`` saves with matplotlib's default writer, ffmpeg, which a fresh machine
usually lacks; we set the writer to Pillow for that call). Maze-v0 frames are drawn with
numpy straight from the env state: the default env's GIF costs milliseconds, not seconds.
"""

from __future__ import annotations

from collections.abc import Callable
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


def band_caption(seeds: list[int]) -> str:
    """What a figure's bands are, given each line's number of seeds: a bootstrap band needs
    at least two, so a one-seed line has none and the caption says so."""
    if not seeds or max(seeds) < 2:
        return "one seed, so no confidence band"
    if min(seeds) < 2:
        return "mean over seeds, 95 % bootstrap CI (none for a line of one seed)"
    return "mean over seeds, 95 % bootstrap CI"


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
    ax.set_title(title + " — " + band_caption([r.shape[0] for r in curves.values()]), fontsize=9)
    ax.grid(alpha=0.3)
    if any(curves):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_episode_stats(
    path: Path,
    stats: dict[str, dict[str, np.ndarray]],
    env_steps: dict[str, np.ndarray],
    title: str,
    bins: int = 50,
):
    """The env's per-episode statistics (e.g. Craftax's achievements) over training, as a
    heatmap per setting (label → name → (seeds, updates)): one row per statistic, one
    column per stretch of training (up to ``bins``), its value the mean over the stretch's
    updates and the setting's healthy seeds. A heatmap, not lines: Craftax has 22 to 67
    statistics, and one update holds a few dozen episodes, so single updates are noisy."""
    import os
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(stats)
    names = list(stats[labels[0]])
    prefix = os.path.commonprefix(names) if len(names) > 1 else ""
    prefix = prefix[: prefix.rfind("/") + 1]  # a shared "achievements/", never half a word
    height = 1.4 + 0.17 * len(names)
    fig, axes = plt.subplots(
        len(labels), 1, figsize=(7.6, height * len(labels)), dpi=120, squeeze=False
    )
    for ax, label in zip(axes[:, 0], labels, strict=True):
        steps = np.asarray(env_steps[label], np.float64)
        updates = len(steps)
        edges = np.linspace(0, updates, min(bins, updates) + 1).astype(int)
        grid = np.full((len(names), len(edges) - 1), np.nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # stretches where none ended
            for r, name in enumerate(names):
                series = np.asarray(stats[label][name], np.float64)
                for c, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
                    grid[r, c] = np.nanmean(series[:, a:b])
        last = np.nanmax(steps) if np.isfinite(steps).any() else updates
        image = ax.imshow(
            grid, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0,
            vmax=max(1.0, float(np.nanmax(grid))) if np.isfinite(grid).any() else 1.0,
            extent=(0, last, len(names) - 0.5, -0.5),
        )  # fmt: skip
        ax.set_yticks(range(len(names)), [n.removeprefix(prefix) for n in names], fontsize=6)
        ax.set_xlabel("environment steps per agent")
        head = " ".join(x for x in (title, label) if x)
        what = prefix.rstrip("/") or "statistics"
        ax.set_title(f"{head}: {what} per episode" if head else f"{what} per episode", fontsize=9)
        fig.colorbar(image, ax=ax, label="mean per episode", fraction=0.04, pad=0.02)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_gif(
    path: Path,
    cfg: PPOConfig,
    policy: Policy,
    key: PRNGKeyArray,
    interval_ms: int = 150,
    max_frames: int | None = None,
    log: Callable[[str], None] | None = None,
) -> int:
    """Play one greedy episode with ``policy`` and save it as a GIF; returns the frame count.

    Maze-v0 is drawn directly from the env state with numpy (milliseconds per frame); other
    Jumanji envs with Jumanji's own renderer, Brax envs with Brax's (about 0.1 s a frame),
    the env suites and own envs with ``can_draw`` through `Env.frame`,
    so an episode longer than ``max_frames`` steps (None: 100, or 1,000 for the maze) is
    shown up to that cap, and the episode's full length is reported through ``log`` (a line
    per stage, e.g. ``print``).
    """
    import matplotlib

    matplotlib.use("Agg")
    from .envs import JumanjiEnv, JumanjiMaze, can_render, make_env

    if not can_render(cfg):
        raise ValueError(
            f"write_gif: no renderer for {cfg.env!r}, time_input={cfg.time_input}, "
            f"maze_visited={cfg.maze_visited}."
        )
    say = log or (lambda _: None)
    env = make_env(cfg)
    if max_frames is None:
        max_frames = 1000 if isinstance(env, JumanjiMaze) else 100
    if isinstance(cfg.env, str) and cfg.env.startswith("brax/"):
        return _write_brax_gif(path, env, policy, interval_ms, max_frames, key, say)
    if env.can_draw:  # the env suites: each draws a state with its library's renderer
        return _write_frames_gif(path, env, policy, interval_ms, max_frames, key, say)
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
    states, hidden, length = [state], policy.initial_hidden(), 0
    for _ in range(env.max_episode_steps):  # the whole episode; its first frames are drawn
        state, ts, hidden = step(policy, state, ts, hidden)
        length += 1
        if len(states) < max_frames:
            states.append(state)
        if bool(ts.last()):
            break
    shown = f"{len(states)} frames" + (
        f", the first {len(states) - 1} of the episode's {length} steps"
        if length >= max_frames
        else f" ({length} steps)"
    )
    say(f"drawing the GIF: {shown} ...")
    if isinstance(env, JumanjiMaze):
        frames = [_maze_frame(s) for s in states]
        _save_gif(path, frames, interval_ms)
        return len(frames)
    # Pillow writes the GIF (no ffmpeg needed); 40 dpi makes Jumanji's 10-inch figures
    # 400 px, drawn ~3x faster than at matplotlib's default 100 dpi.
    rc = {"animation.writer": "pillow", "figure.dpi": 40, "savefig.dpi": 40}
    with matplotlib.rc_context(rc):
        jumanji_env.animate(states, interval=interval_ms, save_path=str(path))
    import matplotlib.pyplot as plt

    plt.close("all")
    return len(states)


#: Maze frame colours (RGB): floor, wall, target, agent.
_MAZE_COLOURS = np.array([[255, 255, 255], [40, 40, 60], [60, 180, 75], [230, 60, 50]], np.uint8)


def _maze_frame(state, cell: int = 24) -> np.ndarray:
    """One Maze-v0 state as an RGB image: walls dark, the target green, the agent red (drawn
    over the target when it stands on it), ``cell`` pixels per cell with a grid line."""
    walls = np.asarray(state.walls)
    kind = walls.astype(np.int64)
    kind[int(state.target_position.row), int(state.target_position.col)] = 2
    kind[int(state.agent_position.row), int(state.agent_position.col)] = 3
    image = _MAZE_COLOURS[np.repeat(np.repeat(kind, cell, 0), cell, 1)]
    image[::cell, :] = image[:, ::cell] = 200  # grid lines
    return image


def _save_gif(path: Path, frames: list[np.ndarray], interval_ms: int) -> None:
    from PIL import Image

    pictures = [Image.fromarray(f) for f in frames]
    pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=interval_ms, loop=0)


def _write_brax_gif(path: Path, env, policy: Policy, interval_ms: int, max_frames: int, key, say):
    """One greedy episode of a Brax env, drawn by Brax's own MuJoCo renderer
    (`brax.io.image.render_array`; offline, through EGL: see `envs._brax`)."""
    from brax.io import image

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
    say(f"drawing the GIF: {len(pipeline)} frames ...")
    frames = image.render_array(env.env.sys, pipeline, height=240, width=320)
    _save_gif(path, [np.asarray(f) for f in frames], interval_ms)
    return len(frames)


def _write_frames_gif(path: Path, env, policy: Policy, interval_ms, max_frames, key, say):
    """One greedy episode of an env that draws its own states (`Env.frame`), up to the
    step that ends it (that step resets, so its state is the next episode's)."""

    @jax.jit
    def step(policy, state, obs, mask, hidden):
        action, hidden = policy.step(hidden, obs, mask)
        return *env.step(state, action), hidden

    state, obs, mask = jax.jit(env.reset)(key)
    states, hidden, length = [state], policy.initial_hidden(), 0
    for _ in range(env.max_episode_steps):
        nxt, out, hidden = step(policy, state, obs, mask, hidden)
        length += 1
        if bool(out.done):
            break
        state, obs, mask = nxt, out.obs, out.mask
        if len(states) < max_frames:
            states.append(state)
    say(f"drawing the GIF: {len(states)} frames of the episode's {length} steps ...")
    frames = [env.frame(s) for s in states]
    _save_gif(path, frames, interval_ms)
    return len(frames)


class _quiet:
    """Silence numpy's all-NaN-slice warnings (an update where no episode ended)."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)
