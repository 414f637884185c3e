# CI's test matrix, as shell functions (docs/jax-versions.md): sourced by .ci/run and .ci/line.
#   venv PYTHON JAX   a fresh venv from PYTHON with the package and JAX, activated; prints the
#                     Python and jax it holds
#   tier NAME CMD...  runs CMD (a test command), appending a table row to .ci-results
#   line PYTHON JAX TIER...   venv, then each TIER: lint, fast (pytest) or slow
#
#   PYTHON  a command or path (python3), or a version (3.13) found under pyenv
#   JAX     readme   the README's install as it stands: pip install -e ".[dev]"
#           newest   the newest jax pip serves PYTHON, with the test tools but without the
#                    gymnax extra (gymnax 1.0.1 requires jax<0.12, so beside newer jax its
#                    tests skip, as they would for a user)
#           0.9.2    (any version) the README's install with jax and jaxlib pinned to it, even
#                    outside setup.cfg's range: whether it works is the question

venv() {
    local python_arg="$1" jax_arg="$2" python="$1" root name
    # Leave the previous line's venv first: its python3 would stand in for the system's.
    if [ -n "${VIRTUAL_ENV:-}" ] && [ "$(type -t deactivate)" = function ]; then deactivate; fi
    if [[ "$python_arg" =~ ^3\.[0-9]+$ ]]; then
        # A version: the newest patch release under pyenv, else python3.X on PATH.
        root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
        python="$(ls -d "$root"/versions/"$python_arg".*/bin/python3 2>/dev/null | sort -V | tail -1)"
        [ -n "$python" ] || python="$(command -v "python$python_arg" || true)"
        [ -n "$python" ] || { echo "CI matrix: no Python $python_arg here (pyenv or PATH)" >&2; return 1; }
    fi
    name=".ci-venv-${python_arg##*/}-jax${jax_arg}"
    rm -rf "$name"
    "$python" -m venv "$name" || return 1
    . "$name/bin/activate"
    python -m pip install --quiet --upgrade pip || return 1
    case "$jax_arg" in
        readme) pip install --quiet -e ".[dev]" ;;  # the README's install
        newest) pip install --quiet -e ".[test]" ;;
        *) pip install --quiet -e ".[dev]" "jax==${jax_arg}" "jaxlib==${jax_arg}" ;;
    esac || return 1
    read -r CI_PY CI_JAX CI_JAXLIB <<< "$(python -c 'import sys, jax, jaxlib
print(sys.version.split()[0], jax.__version__, jaxlib.__version__)')"
    echo "== CI matrix line: Python ${CI_PY}, jax ${CI_JAX}, jaxlib ${CI_JAXLIB} (asked: ${python_arg} ${jax_arg}) =="
    if [ "$jax_arg" = newest ]; then
        echo "   pip's newest jax for this Python: $(pip index versions jax 2>/dev/null | head -1)"
    fi
}

tier() {
    local name="$1" log start status=0 summary result row
    shift
    log="${VIRTUAL_ENV}/tier-${name}.log"
    start=$SECONDS
    "$@" 2>&1 | tee "$log" || status=$?
    summary="$(tail -1 "$log" | sed -e 's/^=* *//' -e 's/ *=*$//')"
    result=passed
    [ "$status" -eq 0 ] || result="FAILED (exit $status)"
    row="| ${CI_PY} | ${CI_JAX} | ${name} | ${result}: ${summary} | $((SECONDS - start)) s | $(git rev-parse --short HEAD), $(date -u +%F) |"
    echo "$row" >> .ci-results
    echo "== CI matrix tier done: $row"
    return "$status"
}

line() {
    local t
    venv "$1" "$2" || return 1
    shift 2
    for t in "$@"; do
        case "$t" in
            lint) ruff check . && ruff format --check . ;;
            fast) tier fast pytest -n auto --dist loadfile ;;  # the README's command
            slow) tier slow pytest -m "slow or subprocess" ;;
            *) echo "CI matrix: unknown tier '$t' (lint, fast or slow)" >&2; return 2 ;;
        esac || return 1
    done
}
