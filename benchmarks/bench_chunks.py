"""Cost of the default chunking: a run directory's checkpoints against one program.

Run:  pytest benchmarks/bench_chunks.py -s

`purejaxppo train` with a run directory trains in chunks (``checkpoint_every="auto"``: ten
chunks of the 100-update medium-maze run, an atomic checkpoint after each) so that SIGTERM
stops at a chunk boundary. This measures what that costs against the one-program run
(``--checkpoint-every 0``): one agent, the reference's medium-maze config, whole `sweep` calls
timed after both paths are compiled, alternating rounds in one process, medians compared.
"""

import pytest
from conftest import measure, report

pytestmark = pytest.mark.timeout(3600)

CODE = """
import json, shutil, statistics, tempfile, time
from purejaxppo import PPOConfig, sweep
cfg = PPOConfig()
root = tempfile.mkdtemp()
def once(chunked, i):
    kwargs = dict(run_dir=f"{{root}}/{{i}}", checkpoint_every="auto") if chunked else {{}}
    t0 = time.perf_counter()
    res = sweep(cfg, [0], **kwargs)
    return time.perf_counter() - t0, res
once(False, "w0"), once(True, "w1")  # compile both, warm up
times = {{"one_program": [], "chunked": []}}
for r in range({rounds}):
    times["one_program"].append(once(False, r)[0])
    times["chunked"].append(once(True, r)[0])
shutil.rmtree(root)
p, c = statistics.median(times["one_program"]), statistics.median(times["chunked"])
print("RESULT " + json.dumps(dict(
    updates=cfg.num_updates, one_program_median_s=p, chunked_median_s=c,
    overhead=c / p - 1, rounds=times)))
"""


def test_default_chunking_overhead(benchmark):
    code = CODE.format(rounds=5)
    result = report(benchmark, benchmark.pedantic(measure, args=(code,), rounds=1, iterations=1))
    assert result["chunked_median_s"] > 0
