#!/usr/bin/env bash
# Set up swinkit's environment in .venv/ at the repository root. Idempotent: a second run on a
# ready machine only checks the stamp and imports (seconds).
#
#   bash tools/setup.sh           # everything (the README's commands call this)
#
# Steps: 1 venv, 2 torch + build tools, 3 mmcv 2.1.0 from source with its ops (~15 min on 2
# cores the first time; pip caches the wheel, so later machines/venvs reuse it), 4 swinkit
# editable with its test extras, 5 DeepSpeed (pinned, pure Python: its C++/CUDA ops are left to
# build on demand, DS_BUILD_OPS=0; --no-deps so it can never replace torch). A failed step says
# which one and how to retry.
#
# On a GPU machine (tools/setup_plan.py makes these choices; `python3.11 tools/setup_plan.py
# show` prints them): a CUDA build of the pinned torch that $PYTHON already has is kept (the
# venv shares its packages; SWINKIT_REUSE_TORCH=0 gives a venv of its own), and mmcv is built
# with its CPU ops only, CUDA hidden (SWINKIT_MMCV_CUDA=1 builds its CUDA ops, which need an
# nvcc matching torch's CUDA). MAX_JOBS defaults to the cores this process may use.
set -euo pipefail
# bash before 4.4 (still on some clusters) reads an empty array's "${a[@]}" as unbound under
# set -u; the plan's answers may be empty arrays, so there unset variables are not errors
if ((BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4))); then set +u; fi
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
VENV=.venv
STAMP_KEY=$(cat pyproject.toml tools/setup.sh tools/setup_plan.py tools/env_spec.py | sha256sum | cut -c1-16)
STAMP="$VENV/.swinkit-setup-$STAMP_KEY"

step() { echo "[setup] step $1/5: $2"; CURRENT="$1 ($2)"; }
fail() { echo "[setup] FAILED at step $CURRENT. Fix the error above and re-run: bash tools/setup.sh" >&2; }
trap fail ERR

"$PY" tools/fetch_asv_assets.py || echo "[setup] warning: the offline asv page's libraries were not fetched (see above); tools/suite.py will name what is missing" >&2

if [ -f "$STAMP" ] && "$VENV/bin/python" -c "import swinkit, mmcv.ops, mmseg.models" 2>/dev/null; then
    echo "[setup] environment ready ($VENV)"
    exit 0
fi

step 1 "virtual environment $VENV ($PY)"
command -v "$PY" >/dev/null || { echo "[setup] $PY not found: install Python 3.11 or set PYTHON=" >&2; false; }
if [ ! -x "$VENV/bin/python" ]; then
    # each answer is one line of words, none with spaces; a failing plan stops the set-up here
    plan=$("$PY" tools/setup_plan.py venv-flags --python "$PY")
    read -r -a VENV_FLAGS <<< "$plan"
    [ ${#VENV_FLAGS[@]} -eq 0 ] || echo "[setup]   sharing $PY's CUDA torch (${VENV_FLAGS[*]})"
    "$PY" -m venv "${VENV_FLAGS[@]}" "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

step 2 "torch 2.13.0 and build tools"
plan=$("$VENV/bin/python" tools/setup_plan.py torch-requirement)
read -r -a TORCH_REQ <<< "$plan"
[ ${#TORCH_REQ[@]} -gt 0 ] || echo "[setup]   torch already installed and supported: kept"
# what each step installs is tools/env_spec.py's list, which asv's history mode installs too
plan=$("$VENV/bin/python" tools/env_spec.py step build)
{ read -r -a BUILD_ENV; read -r -a BUILD_ARGS; } <<< "$plan"
env "${BUILD_ENV[@]}" "${PIP[@]}" install -q "${TORCH_REQ[@]}" "${BUILD_ARGS[@]}"

step 3 "mmcv 2.1.0 with ops (from source once; cached wheel afterwards)"
if ! "$VENV/bin/python" -c "import mmcv.ops" 2>/dev/null; then
    plan=$("$VENV/bin/python" tools/env_spec.py step mmcv)   # env: tools/setup_plan.py mmcv-env
    { read -r -a MMCV_ENV; read -r -a MMCV_ARGS; } <<< "$plan"
    echo "[setup]   building mmcv: about 15 minutes on 2 cores the first time (env ${MMCV_ENV[*]})"
    env "${MMCV_ENV[@]}" "${PIP[@]}" install "${MMCV_ARGS[@]}"
fi

step 4 "swinkit (editable) with test extras"
plan=$("$VENV/bin/python" tools/env_spec.py step project)
{ read -r -a PROJECT_ENV; read -r -a PROJECT_ARGS; } <<< "$plan"
env "${PROJECT_ENV[@]}" "${PIP[@]}" install -q "${PROJECT_ARGS[@]}"
"$VENV/bin/python" -c "import swinkit, mmcv.ops, mmseg.models"

step 5 "DeepSpeed 0.19.8 (ops build on demand: DS_BUILD_OPS=0)"
if ! "$VENV/bin/python" -c "import deepspeed" 2>/dev/null; then
    plan=$("$VENV/bin/python" tools/env_spec.py step deepspeed-deps)   # with the torch pin
    { read -r -a DEPS_ENV; read -r -a DEPS_ARGS; } <<< "$plan"
    env "${DEPS_ENV[@]}" "${PIP[@]}" install -q "${DEPS_ARGS[@]}"
    plan=$("$VENV/bin/python" tools/env_spec.py step deepspeed)   # DS_BUILD_OPS=0, --no-deps
    { read -r -a DS_ENV; read -r -a DS_ARGS; } <<< "$plan"
    env "${DS_ENV[@]}" "${PIP[@]}" install -q "${DS_ARGS[@]}"
fi
"$VENV/bin/python" -c "import torch, deepspeed; assert torch.__version__.startswith('2.13.0'), torch.__version__"
rm -f "$VENV"/.swinkit-setup-*
touch "$STAMP"
echo "[setup] environment ready ($VENV)"
