#!/usr/bin/env bash
# The full jaxspreeze benchmark at GPU sizes (num_envs and batch up to 65,536) on an
# NVIDIA machine, in under 8 minutes, results in the folder given as the argument.
#
#   experiments/gpu_bench.sh RESULTS_DIR     # on the GPU machine, from anywhere
#   experiments/gpu_bench.sh --fetch-wheels  # where pip can reach PyPI: gymnax, brax and
#                                            # their dependencies as wheels in .whl/ for a
#                                            # GPU machine without network (cp312, x86-64)
#
# Needs python3 with jax[cuda], flax, optax, chex, numpy, scipy, matplotlib, seaborn,
# orbax-checkpoint, rich, pytest-benchmark (the lent H200 image has them). gymnax, brax,
# mujoco(-mjx) and their few missing dependencies are installed from .whl/ when they do
# not import (or from PyPI when .whl/ is absent and the network works).
# Writes RESULTS_DIR/bench.json, bench.md (saved after every case), bench.log,
# nvidia-smi.txt. Env: PYTHON (default python3), BENCH_BUDGET_S (start no case after
# this, default 330), BENCH_TIMEOUT_S (hard stop, default 450).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
# pinned to the versions the CPU suite runs with (pyproject resolves the same ranges)
WHEELS=(gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6 brax==0.14.2
        mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 mujoco-mjx==3.17.0
        jaxopt==0.8.5 ml-collections==1.1.0 tensorboardx==2.6.5 trimesh==5.2.0
        flask==3.1.3 flask-cors==6.0.5 glfw==2.11.0 pyopengl==3.1.10 blinker==1.9.0
        itsdangerous==2.2.0 websockets==17.4)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    mkdir -p "$REPO/.whl"
    grep -qxF '/.whl/' "$REPO/.git/info/exclude" 2>/dev/null \
        || echo '/.whl/' >> "$REPO/.git/info/exclude"
    for w in "${WHEELS[@]}"; do
        "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
            --implementation cp --platform manylinux_2_28_x86_64 \
            --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
            -d "$REPO/.whl" "$w"
    done
    echo "wheels in $REPO/.whl: carry .whl to the GPU machine"
    exit 0
fi

OUT="${1:?usage: experiments/gpu_bench.sh RESULTS_DIR | --fetch-wheels}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$REPO"

# dependencies: gymnax and brax (with mujoco-mjx) are not in a bare CUDA jax image
if ! "$PY" -c "import gymnax, brax.envs, mujoco.mjx" >/dev/null 2>&1; then
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --upgrade --target /tmp/jaxspreeze-site .whl/*.whl
        export PYTHONPATH="/tmp/jaxspreeze-site${PYTHONPATH:+:$PYTHONPATH}"
    else
        "$PY" -m pip install -q "${WHEELS[@]}" || {
            echo "gymnax/brax missing and no network: run '$0 --fetch-wheels' where pip" \
                 "works and carry .whl/ here" >&2
            exit 2
        }
    fi
fi
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # jaxspreeze from this checkout
export PYTHONUNBUFFERED=1
"$PY" -c "import jax; assert jax.default_backend() == 'gpu', jax.devices(); print(jax.devices())"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

set +e
timeout "${BENCH_TIMEOUT_S:-450}" "$PY" -m jaxspreeze bench --full --scale gpu --rounds 3 \
    --budget-s "${BENCH_BUDGET_S:-330}" --out "$OUT" \
    --note "experiments/gpu_bench.sh; GPU sizes" 2>&1 | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
set -e
[[ $rc == 124 ]] && echo "hard time limit reached: $OUT/bench.json holds the cases that finished"
echo "results: $OUT"
exit $rc
