import json
import subprocess
import sys
import textwrap


def measure(code: str, timeout: int = 900) -> dict:
    """Run ``code`` in a fresh Python process (cold JAX caches) and return its JSON result.

    The code must print one line ``RESULT {json}``. A fresh process per measurement keeps
    compile times honest: nothing is reused from an earlier benchmark.
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-4000:])
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def report(benchmark, result: dict) -> dict:
    benchmark.extra_info.update(result)
    print("\n" + json.dumps(result, indent=1))
    return result
