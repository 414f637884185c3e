"""SIGINT and SIGTERM during a run: stop at the next checkpoint, or at once on a second one."""

from __future__ import annotations

import os
import sys
from pathlib import Path


class StopOnSignal:
    """SIGINT/SIGTERM during a run.

    Chunked (a run directory with checkpoints): the first signal sets a flag that the chunk
    loop polls, so the run stops at the end of the chunk with a checkpoint; a second one
    stops at once, losing the updates since the last checkpoint. Unchunked
    (``--checkpoint-every 0``): the first signal stops at once and says the run is lost.

    A compiled program does not return to Python until it ends, so a Python signal handler
    would only run then; the signal is read from `signal.set_wakeup_fd` by a watcher thread
    instead, which can stop the process while the program runs.
    """

    def __init__(self, run_dir: Path | None, name: str):
        self.run_dir = run_dir
        self.name = name
        self.signal = None

    def __call__(self) -> bool:
        return self.signal is not None

    def __enter__(self):
        import signal
        import threading

        import jax

        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        signals = (signal.SIGINT, signal.SIGTERM)
        self.old = {s: signal.signal(s, lambda *_: None) for s in signals}
        self.old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._main = jax.process_index() == 0
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        import signal

        while True:
            try:
                data = os.read(self._read, 16)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum == 0:  # our own wake-up at exit
                    return
                if signum not in (signal.SIGINT, signal.SIGTERM):
                    continue  # another handler's signal (e.g. a test runner's SIGALRM)
                name = signal.Signals(signum).name
                code = 130 if name == "SIGINT" else 143
                if self.run_dir is not None and self.signal is None:
                    self.signal = name
                    self._say(
                        f"\n{name}: stopping at the end of this chunk, with a checkpoint "
                        "(send it again to stop at once, losing this chunk)..."
                    )
                    continue
                lost = (
                    f"updates since the last checkpoint in {self.run_dir} are lost; resume "
                    f"with: purejaxppo {self.name} --resume {self.run_dir}"
                    if self.run_dir is not None
                    else "no checkpoints (--checkpoint-every 0), so this run's training is lost"
                )
                self._say(f"\n{name}: stopping now; {lost}.")
                os._exit(code)

    def stopped(self, stop_at: int | None, main_process: bool, where: str) -> int:
        """Say where an unfinished run stopped (``where``: "a chunk boundary", "a
        generation") and how to resume it; returns the exit status (0: --stop-at)."""
        why = self.signal or f"--stop-at {stop_at}"
        if main_process:
            print(
                f"{why}: stopped at {where} with a checkpoint in {self.run_dir}.\n"
                f"resume with: purejaxppo {self.name} --resume {self.run_dir}",
                flush=True,
            )
        if self.signal is None:
            return 0  # stopped where asked: not a failure
        return 130 if self.signal == "SIGINT" else 143

    def _say(self, text: str) -> None:
        if self._main:
            print(text, file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        import signal

        signal.set_wakeup_fd(self.old_fd)
        for s, h in self.old.items():
            signal.signal(s, h)
        os.write(self._write, b"\0")  # wake the watcher so it exits
        self._thread.join(timeout=1)
        os.close(self._write)
        os.close(self._read)
