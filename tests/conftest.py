import atexit
import importlib.util
import os
import shutil
import tempfile

# One CPU device, as JAX's default, whatever this machine's core count: the suite's shapes
# (and so its bitwise checks) must not depend on the host. Tests of the one-device-per-core
# default set their own count in a subprocess (test_cpu_devices.py).
os.environ["PUREJAXPPO_CPU_DEVICES"] = "1"

import jax  # noqa: E402
import pytest  # noqa: E402

from purejaxppo import PPOConfig  # noqa: E402

# On a TPU, float32 matrix products default to one bfloat16 pass (the trainer keeps that
# default: PPOConfig.matmul_precision). The suite checks float32 maths against references,
# so there it runs them in float32, as a CPU does; docs/guide.md, "On a TPU or GPU".
ON_CPU = jax.default_backend() == "cpu"
if not ON_CPU:
    jax.config.update("jax_default_matmul_precision", "highest")
needs_cpu = pytest.mark.skipif(
    not ON_CPU, reason="checks the CPU's own rule (XLA:CPU's cost analysis, its lowering)"
)

# The CLI turns on JAX's persistent compilation cache; in the tests (and the subprocesses
# they start) it lives in a fresh directory of this session, never the user's ~/.cache.
os.environ["PUREJAXPPO_CACHE_DIR"] = tempfile.mkdtemp(prefix="purejaxppo-xla-cache-")
atexit.register(shutil.rmtree, os.environ["PUREJAXPPO_CACHE_DIR"], ignore_errors=True)

# Opt-in, for an accelerator, where compiling is most of the tier's time (on a TPU v5e the
# tier needs ~850 s cold in one process): PUREJAXPPO_TEST_CACHE=DIR keeps the programs this
# process compiles in JAX's persistent cache in DIR, so the next session loads them. A cached
# program is the program that would have been compiled (test_compile_cache.py), so no result
# changes. The CLI's own runs keep the session's fresh cache above.
TEST_CACHE = os.environ.get("PUREJAXPPO_TEST_CACHE")


def suite_cache_on() -> None:
    """Point JAX's persistent cache at ``$PUREJAXPPO_TEST_CACHE``, where it is set."""
    if TEST_CACHE:
        from purejaxppo.engine import enable_compilation_cache

        try:
            enable_compilation_cache(TEST_CACHE)
        except ValueError:
            raise pytest.UsageError(
                f"PUREJAXPPO_TEST_CACHE={TEST_CACHE}: cannot create that directory; "
                "choose another, or unset it"
            ) from None


def pytest_configure(config):
    suite_cache_on()  # before any test module is collected (and compiles)


# The suite's shared small config (3 updates of the medium maze, enough for parameters to
# move apart). Tests that use it share one engine, so its programs compile once per session.
SMALL = PPOConfig(
    maze="medium", num_envs=4, num_steps=32, minibatch_size=64, update_epochs=2, total_timesteps=384
)


#: For a test that builds a gymnax env: skipped, saying why, where the extra is not installed
#: (gymnax 1.0.1 requires jax<0.12, so a venv with jax 0.12 has none).
needs_gymnax = pytest.mark.skipif(
    importlib.util.find_spec("gymnax") is None, reason="pip install '.[gymnax]'"
)

#: The env suites' extras: a test that builds one of their envs is skipped without it.
needs_navix = pytest.mark.skipif(
    importlib.util.find_spec("navix") is None, reason="pip install '.[navix]'"
)
needs_craftax = pytest.mark.skipif(
    importlib.util.find_spec("craftax") is None, reason="pip install '.[craftax]'"
)
needs_xminigrid = pytest.mark.skipif(
    importlib.util.find_spec("xminigrid") is None, reason="pip install '.[xminigrid]'"
)


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)


# Equality rules (the suite must pass on any x86-64 CPU, AMD or Intel):
# * bitwise (`tree_equal`) only for one program with one batch shape: the same program run
#   twice, chunks of one program against the whole, a resumed run against the uninterrupted;
# * across batch shapes (an agent vmapped with others against the same agent alone, agents
#   split over devices), float32 sums may run in another order, so results agree to rounding:
#   one forward pass to a few ulps (`ULP_ATOL`), a few training updates to `ACROSS_SHAPES`.
ULP_ATOL = 1e-6  # ~8 ulps at |x| ~ 1 (one forward pass: 1 ulp was seen on an Intel Xeon)
ACROSS_SHAPES = dict(rtol=1e-4, atol=1e-5)  # after a few updates: ~1e-6 was seen


def tree_close(a, b, rtol: float, atol: float) -> bool:
    """Every leaf equal to ``rtol``/``atol`` (NaNs equal), and the same tree structure."""
    import numpy as np

    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        np.allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, equal_nan=True)
        for x, y in zip(la, lb, strict=True)
    )


def tree_equal(a, b) -> bool:
    """Exact (bitwise) equality of two pytrees of arrays, NaNs compared equal."""
    import numpy as np

    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        np.array_equal(x, y, equal_nan=True) for x, y in zip(la, lb, strict=True)
    )


def cli(capsys, *args) -> tuple[int, str, str]:
    """Run ``purejaxppo ARGS`` in this process: (exit status, stdout, stderr)."""
    from purejaxppo.cli import main

    try:
        code = main([str(a) for a in args])
    except SystemExit as e:  # tyro exits for --help and for flags it cannot parse
        code = e.code
    finally:
        compilation_cache_off()
    out = capsys.readouterr()
    return code, out.out, out.err


def compilation_cache_off() -> None:
    """Undo what an in-process CLI run did to this process: it turns JAX's persistent cache
    on, and JAX decides once per process, so every later test's compile would be written to
    disk too (a slow-tier session once segfaulted inside jax's executable serialisation of
    a later test's program). Fresh processes (the subprocess tests) test the cache itself.
    With ``$PUREJAXPPO_TEST_CACHE`` set, the suite's own cache is turned back on."""
    from jax._src import compilation_cache

    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()
    suite_cache_on()  # the suite's own opt-in cache, where one is set


def one_line(err: str) -> bool:
    """A refusal as the CLI must give it: one line, naming the program."""
    return len(err.strip().splitlines()) == 1 and err.startswith("purejaxppo")


def read_tensorboard(directory) -> dict:
    """Scalars of every event file under ``directory``: tag -> [(step, value)]."""
    import struct

    from tensorboardX.proto import event_pb2

    scalars = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data, at = path.read_bytes(), 0
        while at < len(data):  # TFRecord framing: length, crc, payload, crc
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 16 + length
            for v in event.summary.value:
                scalars.setdefault(v.tag, []).append((event.step, v.simple_value))
    return scalars
