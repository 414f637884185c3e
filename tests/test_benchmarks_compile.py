"""The benchmarks stay runnable: every file under benchmarks/ is collected by pytest, and every
program a benchmark runs in a fresh process (a string of Python, `measure`) compiles.

Running the benchmarks themselves takes minutes to hours each (docs/benchmarks.md has their
commands); this catches what broke two of them silently (an import pasted at column 0 inside
an indented program, an IndentationError only when run) in a second, without running one."""

from __future__ import annotations

import ast
import string
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "benchmarks"
FILES = sorted(BENCH.glob("*.py"))


def programs(path: Path) -> list[tuple[str, str]]:
    """``(name, source)`` of every multi-line string assigned to a name in ``path`` that is
    run as a program (it imports something). The fields of an f-string, or of a template
    the file fills with ``NAME.format(...)``, become the name ``_``."""
    out = []
    text_of_file = path.read_text()
    for node in ast.walk(ast.parse(text_of_file)):
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            text = value.value
            if f"{node.targets[0].id}.format(" in text_of_file:  # a template: fill it
                parts = string.Formatter().parse(text)
                text = "".join(lit + ("_" if field is not None else "") for lit, field, *_ in parts)
        elif isinstance(value, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "_" for v in value.values)
        else:
            continue
        if "\n" in text and "import " in text:
            out.append((f"{path.name}:{node.lineno} {node.targets[0].id}", text))
    return out


PROGRAMS = [p for f in FILES for p in programs(f)]


def test_there_are_programs_to_check():
    assert len(PROGRAMS) >= 20, [name for name, _ in PROGRAMS]


@pytest.mark.parametrize(("name", "source"), PROGRAMS, ids=[n for n, _ in PROGRAMS])
def test_each_benchmark_program_compiles(name, source):
    compile(textwrap.dedent(source), name, "exec")


def test_every_benchmark_file_is_collected():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *map(str, FILES)],
        capture_output=True, text=True, cwd=BENCH.parent, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    collected = {line.split("::")[0] for line in out.stdout.splitlines() if "::" in line}
    files = {f"benchmarks/{f.name}" for f in FILES if f.name.startswith("bench_")}
    assert files <= collected, sorted(files - collected)
