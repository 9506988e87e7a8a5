#!/usr/bin/env bash
# Set up swinkit's environment in .venv/ at the repository root. Idempotent: a second run on a
# ready machine only checks the stamp and imports (seconds). Nothing is compiled.
#
#   bash tools/setup.sh                                  # the README's commands call this
#   PYTHON=python3.12 bash tools/setup.sh                # a GPU node's Python and its torch
#   SWINKIT_WHEELHOUSE=$PWD/wheels bash tools/setup.sh   # offline: tools/wheelhouse.py made it
#
# Steps: 0 check (Python 3.11-3.13; a torch there is 2.5 or newer; the wheelhouse is whole)
# before anything is installed, 1 venv, 2 torch (the one the Python has is kept: the venv shares
# its packages, also where that Python is itself a venv; else the reference 2.13.0) and build tools, 3 swinkit editable with its
# dependencies (mmcv-lite, no compiler) and test extras, 4 DeepSpeed (pinned, pure Python: its
# C++/CUDA ops build on demand, DS_BUILD_OPS=0; --no-deps), 5 the stand-in for mmcv's compiled
# ops in every interpreter of the venv. Every pip step after 2 is constrained to the venv's
# torch, so nothing replaces it. tools/setup_plan.py makes the choices (`python3 tools/
# setup_plan.py show` prints them); tools/env_spec.py lists what each step installs. A failed
# step says which one and how to retry.
set -euo pipefail
# bash before 4.4 (still on some clusters) reads an empty array's "${a[@]}" as unbound under
# set -u; the plan's answers may be empty arrays, so there unset variables are not errors
if ((BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4))); then set +u; fi
cd "$(dirname "$0")/.."
# the first of python3.11, 3.12, 3.13 that runs (a pyenv shim may exist and still fail)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for candidate in python3.11 python3.12 python3.13 python3; do
        if "$candidate" -c "" 2>/dev/null; then PY=$candidate; break; fi
    done
fi
VENV=.venv
STAMP_KEY=$(cat pyproject.toml tools/setup.sh tools/setup_plan.py tools/env_spec.py \
    swinkit/supported.py swinkit/mmcv_stand_in.py | sha256sum | cut -c1-16)
STAMP="$VENV/.swinkit-setup-$STAMP_KEY"
CONSTRAINTS="$VENV/swinkit-constraints.txt"

step() { echo "[setup] step $1/5: $2"; CURRENT="$1 ($2)"; }
fail() { echo "[setup] FAILED at step $CURRENT. Fix the error above and re-run: bash tools/setup.sh" >&2; }
CURRENT="0 (checks)"
trap fail ERR

[ -n "$PY" ] && command -v "$PY" >/dev/null \
    || { echo "[setup] no Python found (tried ${PYTHON:-python3.11, python3.12, python3.13, python3}): install Python 3.11-3.13 or set PYTHON=" >&2; false; }
assets() {
    "$PY" tools/fetch_asv_assets.py || echo "[setup] warning: the offline asv page's libraries were not fetched (see above); tools/suite.py will name what is missing" >&2
}

if [ -f "$STAMP" ] && "$VENV/bin/python" -c "import swinkit, mmseg.models" 2>/dev/null; then
    assets
    echo "[setup] environment ready ($VENV)"
    exit 0
fi

echo "[setup] step 0/5: checks ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
"$PY" tools/setup_plan.py check --python "$PY"
assets
# an answer is captured before it is split, so that a refusal stops the set-up (set -e does
# not see a command substitution's failure inside a here-string)
answer=$("$PY" tools/setup_plan.py pip-source)
read -r -a SOURCE <<< "$answer"
[ ${#SOURCE[@]} -eq 0 ] || echo "[setup]   offline: pip installs from ${SOURCE[*]: -1} only"

step 1 "virtual environment $VENV ($PY)"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# the base's packages, its torch among them, shared where that torch is kept (a .pth line)
shared=$("$PY" tools/setup_plan.py share-base --python "$PY" --venv "$VENV")
[ -z "$shared" ] || echo "[setup]   sharing $PY's packages (its torch): $shared"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

pip_step() {  # pip_step NAME [--keep-mmcv]: tools/env_spec.py's step, constrained to the torch
    local plan envw args
    plan=$("$VENV/bin/python" tools/env_spec.py step "$@" --constraints "$CONSTRAINTS" \
           --source "${SOURCE[*]}")
    { read -r -a envw; read -r -a args; } <<< "$plan"
    env "${envw[@]}" "${PIP[@]}" install -q "${args[@]}"
}

step 2 "torch and build tools"
answer=$("$VENV/bin/python" tools/setup_plan.py torch-requirement --python "$VENV/bin/python")
read -r -a TORCH_REQ <<< "$answer"
if [ ${#TORCH_REQ[@]} -gt 0 ]; then
    "${PIP[@]}" install -q "${SOURCE[@]}" "${TORCH_REQ[@]}"
else
    echo "[setup]   torch already there and supported: kept"
fi
# pin the venv's torch for every later step (a local label such as +cu130 pins that build)
"$VENV/bin/python" -c "import torch; print('torch==' + torch.__version__)" 2>/dev/null > "$CONSTRAINTS"
echo "[setup]   $(cat "$CONSTRAINTS") (every later step is constrained to it)"
pip_step build

step 3 "swinkit (editable) with its dependencies and test extras"
KEEP=()
answer=$("$VENV/bin/python" tools/setup_plan.py keep-mmcv --python "$VENV/bin/python")
if [ -n "$answer" ]; then
    echo "[setup]   a compiled mmcv is already here: kept (mmcv-lite not installed)"
    KEEP=(--keep-mmcv)
fi
pip_step project-deps "${KEEP[@]}"
pip_step project

step 4 "DeepSpeed 0.19.8 (ops build on demand: DS_BUILD_OPS=0)"
"$VENV/bin/python" -c "import deepspeed" 2>/dev/null || pip_step deepspeed

step 5 "the stand-in for mmcv's compiled ops, in every interpreter of $VENV"
"$VENV/bin/python" tools/env_spec.py stand-in >/dev/null
ready=$("$VENV/bin/python" -c "import mmseg.models, deepspeed, swinkit.cli, torch
from swinkit.mmcv_stand_in import in_use
print('[setup]   torch', torch.__version__, '| mmcv ops:', 'stand-in (none compiled)' if in_use() else 'compiled')" 2>&1) \
    || { echo "$ready" >&2; false; }
echo "$ready" | grep -v "Setting accelerator" || true
rm -f "$VENV"/.swinkit-setup-*
touch "$STAMP"
echo "[setup] environment ready ($VENV)"
