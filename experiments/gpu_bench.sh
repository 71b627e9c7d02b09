#!/usr/bin/env bash
# jaxspreeze on an NVIDIA machine, one command: autotune's measured surface (grids up to
# 65,536 envs and samples per batch), the autotuned-vs-default learning comparison and
# the full benchmark at GPU sizes, results in the folder given as the argument.
#
#   experiments/gpu_bench.sh RESULTS_DIR [STAGES]  # on the GPU machine, from anywhere
#   experiments/gpu_bench.sh --fetch-wheels  # where pip can reach PyPI: gymnax, brax and
#                                            # their dependencies as wheels in .whl/ for a
#                                            # GPU machine without network (cp312, x86-64)
#
# Needs python3 with jax[cuda], flax, optax, chex, numpy, scipy, matplotlib, seaborn,
# orbax-checkpoint, rich, pytest-benchmark (the lent H200 image has them). gymnax, brax,
# mujoco(-mjx), MuJoCo Playground and their few missing dependencies are installed from
# .whl/ when they do not import (or from PyPI when .whl/ is absent and the network works).
# STAGES (default "autotune learning bench", any subset, in that order):
#   autotune  `jaxspreeze autotune` for SAC on gymnax/Pendulum-v1 with a 10M-step budget
#             and a 1M buffer (so the learning guards let the grids reach 65,536 envs and
#             batch 65,536) -> RESULTS_DIR/autotune/autotune.{json,md,png}, autotune.log
#   learning  `jaxspreeze bench --full --only learning`: autotuned vs default, 3 seeds,
#             time to threshold and final return on SAC/TD3 Pendulum, PPO CartPole, SAC
#             brax inverted_pendulum -> RESULTS_DIR/learning/bench.{json,md},
#             autotune-<task>.png, bench.log
#   bench     the rest of the full benchmark at GPU sizes -> RESULTS_DIR/bench.{json,md},
#             bench.log (saved after every case)
#   score     (only when named) `jaxspreeze score --scale gpu`: time to a return threshold,
#             jaxspreeze beside each peer that runs the row (brax's trainers on the brax and
#             Playground rows, rejax on the gymnax rows, SBX on the gymnasium rows when
#             installed; a missing peer is a skipped side in the report), each side and seed
#             in its own process (the wall counts imports and compilation), cold and warm
#             compile caches, at 16x the CPU rows' envs, budget and batch (SAC: gradient
#             steps) -> RESULTS_DIR/score/score.{json,md} and <row>.png (written after every
#             run), score.log. SCORE_ROWS (default: every row), SCORE_SEEDS (default 1: a
#             10-minute call does not hold 3 seeds of every row), SCORE_RUN_TIMEOUT_S (one
#             side's run, default 150). Needs mujoco_playground (pip install
#             playground==0.2.0; without it the Playground rows are reported as failed)
#   fast      (only when named) FastTD3 at the paper's sizes on Playground CheetahRun and brax
#             humanoid (experiments/presets/fasttd3_*_gpu.toml), FAST_RUN_S (default 270)
#             of wall each: the return against the wall from the command's start ->
#             RESULTS_DIR/fast/fast.md, <preset>/metrics.jsonl; FastTD3's published
#             wall-clock curves are the anchor (issue 26: half their wall to their return)
#   population (only when named) a population in one program (issue 27): `jaxspreeze
#             sweep --members 64 --sample` over the actor and critic learning rates, SAC
#             then TD3 on brax halfcheetah, 32 envs, batch 256 and 4 gradient steps per
#             member, POP_STEPS env steps per member (default 65,536), each run at most
#             POP_TIMEOUT_S (default 240) -> RESULTS_DIR/population/population.md (env
#             steps/s summed over the members and per member, update samples/s, compile,
#             train and wall seconds, members per hour at this budget), <algo>-<members>/
#             runs and logs. POP_MEMBERS (default 64), POP_ENV (default brax/halfcheetah;
#             any brax/ or playground/ task)
#   minatar   (only when named) MinAtar at the published budget (issues 40, 41): PPO on
#             Breakout and SpaceInvaders (purejaxql's ppo_minatar.yaml, PureJaxRL's PPO) and
#             PQN on Breakout (purejaxql's pqn_minatar.yaml), 10M env steps each
#             (jaxspreeze/presets/*_minatar_gpu.toml), each run at most MINATAR_RUN_S (default
#             180) -> RESULTS_DIR/minatar/minatar.md (final return, env steps, compile, train
#             and command wall), <preset>/ runs and logs. MINATAR_PRESETS (default the three)
#   suites    (only when named) the JAX suites (issue 42): PPO on Craftax-Classic-Symbolic
#             at a published-scale budget (50M env steps; Craftax_Baselines' PPO settings,
#             jaxspreeze/presets/ppo_craftax_classic_symbolic_gpu.toml), at most SUITES_RUN_S
#             (default 300) of wall -> RESULTS_DIR/suites/suites.md (final return and its
#             share of Classic's maximum, env steps, compile, train and command wall),
#             <preset>/ run and log; then the suite rows of `jaxspreeze bench --full --only suite-` at GPU sizes (each
#             suite's env stepping against its own vmapped scan and the bare transition;
#             a suite not installed is a skipped row naming its pip install), started within
#             SUITES_BENCH_BUDGET_S (default 150), stopped at SUITES_BENCH_TIMEOUT_S (default
#             240) -> RESULTS_DIR/suites/bench.{json,md}, bench.log. Needs craftax and
#             xminigrid (installed by the stage from .whl/ or PyPI when they do not import;
#             navix and jumanji are not: their rows are skipped rows naming the install)
#   scaling   (only when named) data parallelism, 1 device vs every device, the same
#             sizes per device -> RESULTS_DIR/scaling/scaling.md (env steps/s and update
#             samples/s, in all and per device), devices-<d>/ runs and logs; with an even
#             number N >= 2 of devices also --placement split-data over all N (the same
#             sizes per actor/critic pair) -> split-data-<N>/
# and RESULTS_DIR/nvidia-smi.txt. Env: PYTHON (default python3); AUTOTUNE_BUDGET_S (the
# autotune stage's probe budget, default 90; JAXSPREEZE_AUTOTUNE_BUDGET_S overrides the
# learning tasks' own), LEARNING_TIMEOUT_S (default 420), SCORE_TIMEOUT_S (default 540: one
# 10-minute device call; the rows saved by then come back), BENCH_BUDGET_S (start no case
# after this, default 330), BENCH_TIMEOUT_S (hard stop, default 450). All three stages
# need about 15 minutes on an H200; run them as separate calls where a call is shorter.
#
# GPU_BENCH_DRY=1: a dry run on the CPU, so that a lent device's minutes are never spent on
# a broken script: no wheel installs, no GPU check, no nvidia-smi, and every stage at tiny
# sizes (autotune: a 3 s budget; learning: one task, 3 s of autotune; bench: two cheap
# cases, one round; score: one gymnax row, one seed, cold only, 4,096 env steps; fast and
# minatar and suites: their presets cut to a few thousand env steps and a few envs, the
# suites' bench one Navix row of 64 envs, one round; population: 2
# members on gymnax/Pendulum-v1; scaling: 64 envs), each result file where the real run
# writes it. A dry run's per-run time limits default to 600 s (900 s for learning):
# compiles on a busy CPU are slow.
# tests/test_gpu_bench_dry.py (slow) runs every stage this way.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
# pinned to the versions the CPU suite runs with (pyproject resolves the same ranges)
WHEELS=(gymnax==1.0.1 gymnasium==1.3.0 farama-notifications==0.0.6 brax==0.14.2
        mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 mujoco-mjx==3.17.0
        jaxopt==0.8.5 ml-collections==1.1.0 tensorboardx==2.6.5 trimesh==5.2.0
        flask==3.1.3 flask-cors==6.0.5 glfw==2.11.0 pyopengl==3.1.10 blinker==1.9.0
        itsdangerous==2.2.0 websockets==17.4
        playground==0.2.0 lxml==6.1.3 mediapy==1.2.7 tqdm==4.70.1  # score: Playground
        rejax==0.1.3 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10
        gast==0.7.0 decorator==5.2.1 cloudpickle==2.1.0  # score: the rejax peer
        craftax==1.6.1 imageio==2.38.2 xminigrid==0.9.3)  # suites: Craftax, XLand-MiniGrid

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

OUT="${1:?usage: experiments/gpu_bench.sh RESULTS_DIR [STAGES] | --fetch-wheels}"
STAGES="${2:-autotune learning bench}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$REPO"
DRY="${GPU_BENCH_DRY:-0}"
dry() { [[ "$DRY" == 1 ]]; }
SCALE=gpu
dry && SCALE=cpu

# dependencies: gymnax and brax (with mujoco-mjx) are not in a bare CUDA jax image
if dry; then
    echo "GPU_BENCH_DRY=1: a dry run on $(uname -n) at tiny sizes (no installs, no GPU)"
elif ! "$PY" -c "import gymnax, brax.envs, mujoco.mjx, mujoco_playground, rejax" >/dev/null 2>&1; then
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
if dry; then
    "$PY" -c "import jax; print(jax.devices())"
else
    "$PY" -c "import jax; assert jax.default_backend() == 'gpu', jax.devices(); print(jax.devices())"
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
fi

has() { [[ " $STAGES " == *" $1 "* ]]; }
status=0
set +e
if has autotune; then
    mkdir -p "$OUT/autotune"
    SIZES=(--total-steps 10000000 --buffer-size 1000000 --autotune-budget-s "${AUTOTUNE_BUDGET_S:-90}")
    dry && SIZES=(--total-steps 4096 --buffer-size 4096 --autotune-budget-s "${AUTOTUNE_BUDGET_S:-3}")
    timeout 300 "$PY" -m jaxspreeze autotune --out "$OUT/autotune" --algo sac \
        --env gymnax/Pendulum-v1 "${SIZES[@]}" 2>&1 | tee "$OUT/autotune/autotune.log"
    rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
fi
if has learning; then
    mkdir -p "$OUT/learning"
    TASKS=(--only learning)
    if dry; then
        TASKS=(--only learning-ppo-CartPole-v1)
        export JAXSPREEZE_AUTOTUNE_BUDGET_S="${JAXSPREEZE_AUTOTUNE_BUDGET_S:-3}"
    fi
    timeout "${LEARNING_TIMEOUT_S:-$(dry && echo 900 || echo 420)}" "$PY" -m jaxspreeze bench --full "${TASKS[@]}" \
        --scale "$SCALE" --out "$OUT/learning" \
        --note "experiments/gpu_bench.sh; autotuned vs default" 2>&1 | tee "$OUT/learning/bench.log"
    rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    [[ $rc == 124 ]] && echo "learning: time limit reached; $OUT/learning/bench.json" \
        "holds the tasks that finished"
fi
if has bench; then
    # every case of the full selection but the learning ones (the stage above) and the
    # suites' rows (stage suites)
    # (a dry run: two cheap cases of the same list, one round)
    KEEP='.'
    ROUNDS=(--rounds 3)
    if dry; then
        KEEP='^(sampling-gymnax/CartPole-v1-64|update-ppo-256)$'
        ROUNDS=(--rounds 1 --warmup 0)
    fi
    ONLY=()
    while read -r id; do ONLY+=(--only "$id"); done \
        < <("$PY" -m jaxspreeze bench --list --full --scale "$SCALE" | grep -v '^learning-' \
            | grep -v '^suite-' | grep -E "$KEEP")  # the suites' rows: stage suites
    timeout "${BENCH_TIMEOUT_S:-450}" "$PY" -m jaxspreeze bench --full --scale "$SCALE" \
        "${ROUNDS[@]}" "${ONLY[@]}" --budget-s "${BENCH_BUDGET_S:-330}" --out "$OUT" \
        --note "experiments/gpu_bench.sh; GPU sizes" 2>&1 | tee "$OUT/bench.log"
    rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    [[ $rc == 124 ]] && echo "hard time limit reached: $OUT/bench.json holds the cases that finished"
fi
if has score; then
    # time to score: jaxspreeze beside the peers, each side and seed in its own process,
    # interleaved, cold then warm compile cache, at 16x the CPU rows' sizes
    mkdir -p "$OUT/score"
    ROWS=()
    EXTRA=()
    if dry; then
        SCORE_ROWS="${SCORE_ROWS:-ppo-CartPole-v1}"
        EXTRA=(--no-warm --total-steps 4096)
    fi
    for r in ${SCORE_ROWS:-}; do ROWS+=(--rows "$r"); done
    timeout "${SCORE_TIMEOUT_S:-540}" "$PY" -m jaxspreeze score --scale "$SCALE" "${EXTRA[@]}" \
        --seeds "${SCORE_SEEDS:-1}" "${ROWS[@]}" --run-timeout-s "${SCORE_RUN_TIMEOUT_S:-150}" \
        --out "$OUT/score" --note "experiments/gpu_bench.sh; GPU sizes" 2>&1 \
        | tee "$OUT/score/score.log"
    rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    [[ $rc == 124 ]] && echo "score: time limit reached; $OUT/score/score.json" \
        "holds the runs that finished"
fi
if has fast; then
    # FastTD3 at the paper's sizes (the registry's accelerator defaults: 1,024 envs, 2
    # gradient steps of 32,768 per env step; the presets' widths and value ranges) on
    # Playground CheetahRun and brax humanoid, each for FAST_RUN_S seconds of the wall:
    # return against wall time from the command's start (metrics.jsonl, summary.json)
    mkdir -p "$OUT/fast"
    SIZES=(--eval-every 409600)
    dry && SIZES=(--total-steps 512 --num-envs 4 --batch-size 32 --buffer-size 1024
                  --learning-starts 64 --eval-every 256 --eval-episodes 2)
    for preset in fasttd3_cheetah_run_gpu fasttd3_brax_humanoid_gpu; do
        timeout "${FAST_RUN_S:-$(dry && echo 600 || echo 270)}" "$PY" -m jaxspreeze train \
            --config "experiments/presets/$preset.toml" "${SIZES[@]}" --sinks jsonl \
            --logdir "$OUT/fast" --run-name "$preset" --overwrite 2>&1 | tee "$OUT/fast/$preset.log"
        rc=${PIPESTATUS[0]}; [[ $rc != 0 && $rc != 124 ]] && status=$rc
    done
    "$PY" - "$OUT/fast" <<'PYEOF' | tee "$OUT/fast/fast.md"
import json, pathlib, sys
print("| preset | eval env steps | wall s | return |")
print("|---|---|---|---|")
for f in sorted(pathlib.Path(sys.argv[1]).glob("*/metrics.jsonl")):
    for line in f.read_text().splitlines():
        r = json.loads(line)
        if "eval_return" in r:
            print(f"| {f.parent.name} | {r['env_steps']:,} | {r.get('wall_s', float('nan')):.0f} | "
                  f"{r['eval_return']:.1f} |")
PYEOF
fi
if has minatar; then
    # MinAtar at the published budget and settings (10M env steps; the presets cite their
    # sources): each preset a run of its own, at most MINATAR_RUN_S of wall; the final
    # evaluation's return beside the wall from the command's start (summary.json)
    mkdir -p "$OUT/minatar"
    SIZES=()
    dry && SIZES=(--total-steps 4096 --num-envs 8 --rollout-steps 16 --batch-size 64
                  --chunk-iterations 4 --eval-every 2048 --eval-episodes 4)
    for preset in ${MINATAR_PRESETS:-ppo_breakout_minatar_gpu ppo_space_invaders_minatar_gpu pqn_breakout_minatar_gpu}; do
        timeout "${MINATAR_RUN_S:-$(dry && echo 600 || echo 180)}" "$PY" -m jaxspreeze train \
            --config "jaxspreeze/presets/$preset.toml" "${SIZES[@]}" --sinks jsonl \
            --logdir "$OUT/minatar" --run-name "$preset" --overwrite 2>&1 \
            | tee "$OUT/minatar/$preset.log"
        rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    done
    "$PY" - "$OUT/minatar" <<'PYEOF' | tee "$OUT/minatar/minatar.md"
import json, pathlib, sys
print("| preset | env | env steps | final return | compile s | train s | command wall s | env steps/s |")
print("|---|---|---|---|---|---|---|---|")
for d in sorted(p for p in pathlib.Path(sys.argv[1]).iterdir() if p.is_dir()):
    cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else {}
    if not (d / "summary.json").exists():  # stopped by the timeout: its last evaluation
        evals = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()
                 if '"eval_return"' in x] if (d / "metrics.jsonl").exists() else []
        last = evals[-1] if evals else {}
        print(f"| {d.name} | {cfg.get('env', '?')} | {last.get('env_steps', 0):,} (timed out) | "
              f"{last.get('eval_return', float('nan')):.2f} (last eval) | | | | |")
        continue
    s = json.loads((d / "summary.json").read_text())
    ret = s.get("final_eval_return", s.get("eval_return", float("nan")))
    print(f"| {d.name} | {cfg.get('env', '?')} | {s['env_steps']:,} | {ret:.2f} | "
          f"{s.get('compile_s', 0):.0f} | {s.get('train_s', 0):.0f} | "
          f"{s.get('command_wall_s', s.get('wall_s', 0)):.0f} | {s['env_steps_per_s']:,.0f} |")
print()
print("Published (10M env steps): experiments/results/minatar_cpu.md, References.")
PYEOF
fi
if has suites; then
    # the JAX suites: PPO on Craftax-Classic-Symbolic at 50M env steps (Craftax_Baselines'
    # settings), its final return and Craftax score beside the wall; then the suite rows
    mkdir -p "$OUT/suites"
    SUITES=(craftax==1.6.1 imageio==2.38.2 xminigrid==0.9.3)  # also in WHEELS
    if ! dry && ! "$PY" -c "import craftax, xminigrid" >/dev/null 2>&1; then
        if compgen -G ".whl/craftax-*.whl" >/dev/null; then
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target /tmp/jaxspreeze-site .whl/craftax-*.whl .whl/imageio-*.whl \
                .whl/xminigrid-*.whl
            export PYTHONPATH="/tmp/jaxspreeze-site:$PYTHONPATH"
        else
            "$PY" -m pip install -q "${SUITES[@]}" \
                || echo "suites: craftax missing and no network: run '$0 --fetch-wheels'" >&2
        fi
    fi
    SIZES=()
    dry && SIZES=(--total-steps 4096 --num-envs 8 --rollout-steps 16 --batch-size 64
                  --chunk-iterations 4 --eval-every 2048 --eval-episodes 4)
    preset=ppo_craftax_classic_symbolic_gpu
    timeout "${SUITES_RUN_S:-$(dry && echo 600 || echo 300)}" "$PY" -m jaxspreeze train \
        --config "jaxspreeze/presets/$preset.toml" "${SIZES[@]}" --sinks jsonl \
        --logdir "$OUT/suites" --run-name "$preset" --overwrite 2>&1 | tee "$OUT/suites/$preset.log"
    rc=${PIPESTATUS[0]}; [[ $rc != 0 && $rc != 124 ]] && status=$rc
    "$PY" - "$OUT/suites/$preset" <<'PYEOF' | tee "$OUT/suites/suites.md"
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
MAX = 22.0  # Classic's maximum return: one per achievement (suites_cpu.md)
print("| preset | env steps | final return | % of the maximum return | compile s | train s | command wall s | env steps/s |")
print("|---|---|---|---|---|---|---|---|")
if (d / "summary.json").exists():
    s = json.loads((d / "summary.json").read_text())
    ret = s.get("final_eval_return", s.get("eval_return", float("nan")))
    print(f"| {d.name} | {s['env_steps']:,} | {ret:.2f} | {100 * ret / MAX:.1f} | "
          f"{s.get('compile_s', 0):.0f} | {s.get('train_s', 0):.0f} | "
          f"{s.get('command_wall_s', s.get('wall_s', 0)):.0f} | {s['env_steps_per_s']:,.0f} |")
else:  # stopped by the time limit: its last evaluation
    evals = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()
             if '"eval_return"' in x] if (d / "metrics.jsonl").exists() else []
    last = evals[-1] if evals else {}
    ret = last.get("eval_return", float("nan"))
    print(f"| {d.name} | {last.get('env_steps', 0):,} (timed out) | {ret:.2f} (last eval) | "
          f"{100 * ret / MAX:.1f} | | | | |")
print()
print("Published: the Craftax paper's PPO (Craftax_Baselines); the CPU row at 1M env steps: "
      "experiments/results/suites_cpu.md.")
PYEOF
    ONLY=(--only suite-)
    ROUNDS=(--rounds 3)
    if dry; then
        ONLY=(--only suite-navix/Navix-Empty-8x8-v0-64)
        ROUNDS=(--rounds 1 --warmup 0)
    fi
    timeout "${SUITES_BENCH_TIMEOUT_S:-$(dry && echo 600 || echo 240)}" "$PY" -m jaxspreeze bench \
        --full --scale "$SCALE" "${ROUNDS[@]}" "${ONLY[@]}" --budget-s "${SUITES_BENCH_BUDGET_S:-150}" \
        --out "$OUT/suites" --note "experiments/gpu_bench.sh; the suites' rows" 2>&1 \
        | tee "$OUT/suites/bench.log"
    rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    [[ $rc == 124 ]] && echo "suites: time limit reached: $OUT/suites/bench.json holds the rows that finished"
fi
if has population; then
    # members x seeds slots vmapped in one program: the sum over the members of env
    # steps/s, against the wall (compile included) of the whole population
    mkdir -p "$OUT/population"
    M="${POP_MEMBERS:-64}"
    SIZES=(--num-envs 32 --batch-size 256 --grad-steps 4 --buffer-size 65536
           --learning-starts 2048 --total-steps "${POP_STEPS:-65536}")
    if dry; then
        M="${POP_MEMBERS:-2}"
        POP_ENV="${POP_ENV:-gymnax/Pendulum-v1}"  # the script's path, not brax's compile
        SIZES=(--num-envs 4 --batch-size 32 --grad-steps 2 --buffer-size 1024
               --learning-starts 64 --total-steps "${POP_STEPS:-512}")  # TD3: policy_delay 2
    fi
    for algo in sac td3; do
        timeout "${POP_TIMEOUT_S:-$(dry && echo 600 || echo 240)}" "$PY" -m jaxspreeze sweep --algo "$algo" \
            --env "${POP_ENV:-brax/halfcheetah}" --members "$M" \
            --sample "$algo.actor_lr=log-uniform:1e-4:3e-3" \
            --sample "$algo.critic_lr=log-uniform:1e-4:3e-3" \
            "${SIZES[@]}" --eval-every 0 \
            --sinks jsonl --logdir "$OUT/population" --run-name "$algo-$M" --overwrite 2>&1 \
            | tee "$OUT/population/$algo-$M.log"
        rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    done
    "$PY" - "$OUT/population" <<'PYEOF' | tee "$OUT/population/population.md"
import json, pathlib, sys
print("| run | env | members x seeds | env steps per member | env steps/s (all members) "
      "| per member | update samples/s | compile s | train s | wall s | members/hour |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for d in sorted(p for p in pathlib.Path(sys.argv[1]).iterdir() if p.is_dir()):
    cfg = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else {}
    m, seeds = len(cfg.get("population") or ()) or 1, cfg.get("num_seeds", 1)
    if not (d / "summary.json").exists():  # stopped by the timeout: its last chunk's rate
        chunks = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()
                  if '"chunk"' in x] if (d / "metrics.jsonl").exists() else []
        last = chunks[-1] if chunks else {}
        print(f"| {d.name} | {cfg.get('env', '?')} | {m} x {seeds} | {last.get('env_steps', 0):,} "
              f"(timed out) | {last.get('env_steps_per_s', 0):,.0f} (last chunk) | | | | | | |")
        continue
    s = json.loads((d / "summary.json").read_text())
    wall = s["wall_s"]
    print(f"| {d.name} | {cfg['env']} | {m} x {seeds} | {s['env_steps']:,} | "
          f"{s['env_steps_per_s']:,.0f} | {s['env_steps_per_s'] / m:,.0f} | "
          f"{s['update_samples_per_s']:,.0f} | {s.get('compile_s', 0):.0f} | "
          f"{s.get('train_s', 0):.0f} | {wall:.0f} | {m * 3600 / wall:,.0f} |")
print()
print("env steps/s counts every member's envs (and seeds); per member: divided by the members. "
      "members/hour: members trained to this budget per hour of wall (compile included).")
PYEOF
fi
if has scaling; then
    # data parallelism, weak scaling: the same per-device sizes (SAC Pendulum, 4096 envs,
    # batch 4096, 1M replay rows per device) on 1 device and on every device of this
    # machine (one process, --placement data); env steps/s and update samples/s per device
    mkdir -p "$OUT/scaling"
    N=$("$PY" -c "import jax; print(jax.device_count())")
    E=4096 B=1048576 I=400  # per device: envs (and batch), replay rows, iterations
    dry && E=64 B=4096 I=32  # 2,048 env steps: past SAC's warm-up of 1,024
    for d in $(echo 1 "$N" | tr ' ' '\n' | sort -un); do
        CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((d - 1))) timeout "${SCALING_TIMEOUT_S:-$(dry && echo 600 || echo 240)}" \
            "$PY" -m jaxspreeze train --algo sac --env gymnax/Pendulum-v1 --placement data \
            --num-envs $((E * d)) --batch-size $((E * d)) --buffer-size $((B * d)) \
            --total-steps $((E * I * d)) --eval-every 0 --sinks jsonl \
            --logdir "$OUT/scaling" --run-name "devices-$d" --overwrite 2>&1 \
            | tee "$OUT/scaling/devices-$d.log"
        rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    done
    if (( N >= 2 && N % 2 == 0 )); then
        # the split composed with data parallelism: k = N/2 pairs, the same sizes per pair
        k=$((N / 2))
        timeout "${SCALING_TIMEOUT_S:-$(dry && echo 600 || echo 240)}" \
            "$PY" -m jaxspreeze train --algo sac --env gymnax/Pendulum-v1 --placement split-data \
            --num-envs $((E * k)) --batch-size $((E * k)) --buffer-size $((B * k)) \
            --total-steps $((E * I * k)) --eval-every 0 --sinks jsonl \
            --logdir "$OUT/scaling" --run-name "split-data-$N" --overwrite 2>&1 \
            | tee "$OUT/scaling/split-data-$N.log"
        rc=${PIPESTATUS[0]}; [[ $rc != 0 ]] && status=$rc
    fi
    "$PY" - "$OUT/scaling" <<'PYEOF' | tee "$OUT/scaling/scaling.md"
import json, pathlib, sys
print("| placement | devices | shards | env steps/s | update samples/s | env steps/s per shard "
      "| samples/s per shard |")
print("|---|---|---|---|---|---|---|")
for f in sorted(pathlib.Path(sys.argv[1]).glob("*/summary.json")):
    s = json.loads(f.read_text()); t = s["topology"]
    print(f"| {t.get('placement_kind', 'data')} | {t['devices']} | {t['data_parallel_devices']} | "
          f"{s['env_steps_per_s']:,.0f} | {s['update_samples_per_s']:,.0f} | "
          f"{t['per_device']['env_steps_per_s']:,.0f} | {t['per_device']['update_samples_per_s']:,.0f} |")
print()
print("A shard is one device (data) or one actor/critic pair (split-data).")
PYEOF
fi
set -e
echo "results: $OUT"
exit $status
