#!/usr/bin/env bash
# The first thing to run on a machine with a CUDA GPU: the CUDA path of the suite (nccl, device
# timing events, the device chosen by local rank) at world size 1, through both layers.
#
#   scripts/gpu-check.sh                 # on the GPU: every case below, about 2-5 minutes
#   scripts/gpu-check.sh --device cpu    # the same cases on CPU ranks (gloo, even where oneCCL's
#                                        # bindings are installed): checks this script
#
# First the GPU, its memory, torch and NCCL, and the bound of each GPU from NVML (NVLink, else
# PCIe: docs/peak.md). Cases, each under --dist torch and --dist deepspeed: every op scanned with --check --stats,
# a single-size run, --async-op, and all ten ops with --op, two dtypes, --repeat and --overlap; each ends in one summary line, "ok" with what it saw or
# "FAILED" with why. Exit status: 0 all ok, 1 a case failed, 2 no GPU here (nothing checked).
#
# Set-up, as the README says for a GPU machine: a Python with the CUDA build of torch that
# matches the driver (PYTHON, default .venv/bin/python if present, else python3), then the
# rest of requirements.txt. Where DeepSpeed is missing it is installed from wheels in .whl/ if
# there are any (machines without a registry), else from the registry; if neither works the
# deepspeed cases say so and count as failed.
set -u
cd "$(dirname "$0")/.."

DEVICE=cuda
if [ "${1:-}" = "--device" ] && [ -n "${2:-}" ]; then DEVICE=$2; fi
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi
# Scans to 2^23 elements per rank on the GPU; on CPU ranks to 2^11, enough to check this script
# and quick.
[ "$DEVICE" = cuda ] && MAXSIZE=${GPU_CHECK_MAXSIZE:-24} || MAXSIZE=${GPU_CHECK_MAXSIZE:-12}
# CPU ranks check this script's cases, on gloo: it runs every op, dtype and --op they use (ccl,
# detected once `make ccl` installed it, has no --op avg; test_ccl.py covers it).
BACKEND=()
[ "$DEVICE" = cpu ] && BACKEND=(--backend gloo)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# DeepSpeed JIT-builds its CPU communication op once per extensions folder (not on cuda).
[ -d .venv ] && EXTENSIONS=$PWD/.venv/torch_extensions || EXTENSIONS=$WORK/torch_extensions
export PYTHONUNBUFFERED=1 TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$EXTENSIONS}
say() { echo "gpu-check: $*"; }

if ! "$PY" -c "import torch" 2>/dev/null; then
    say "$PY has no torch; install the CUDA build of torch for your driver first"; exit 2
fi
if [ "$DEVICE" = cuda ]; then
    if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        say "no CUDA GPU is present here (torch.cuda.is_available() is False); nothing checked"
        exit 2
    fi
    "$PY" -c "import torch; p = torch.cuda.get_device_properties(0); print('gpu-check: ' + \
torch.cuda.get_device_name(0) + f', {p.total_memory / 2**30:.0f} GiB, torch ' + torch.__version__ + \
', nccl ' + '.'.join(map(str, torch.cuda.nccl.version())))"
fi

if ! "$PY" -c "import deepspeed" >/dev/null 2>&1; then
    if compgen -G ".whl/*.whl" >/dev/null; then
        "$PY" -m pip install -q --no-index --find-links .whl deepspeed >"$WORK/pip.log" 2>&1
    else
        "$PY" -m pip install -q deepspeed==0.19.8 >"$WORK/pip.log" 2>&1
    fi || say "DeepSpeed could not be installed: $(tail -n 1 "$WORK/pip.log")"
fi
for module in numpy tqdm; do  # all_gather_object needs numpy; tqdm draws progress
    "$PY" -c "import $module" 2>/dev/null || "$PY" -m pip install -q "$module" >/dev/null 2>&1
done

# The bound of each GPU within the host (docs/peak.md): its NVLinks (active links x the rate of
# their generation), else its PCIe link (generation x width), from NVML through pynvml
# (nvidia-ml-py, installed when missing and reachable); what --peak auto holds a run against.
if [ "$DEVICE" = cuda ]; then
    "$PY" -c "import pynvml" 2>/dev/null || "$PY" -m pip install -q --retries 1 --timeout 10 nvidia-ml-py >/dev/null 2>&1
    "$PY" -c 'import sys; sys.path.insert(0, "."); from commbench.bounds import nvml
for line in nvml.describe(nvml.load()): print("gpu-check: " + line)'
fi

FAILED=0
# check NAME EXPECT_OPS ARGS...: run all ops of ARGS at world size 1 and read the results file
check() {
    local name=$1 want=$2; shift 2
    local out="$WORK/$name.jsonl" started=$SECONDS status
    timeout 300 "$PY" run_all.py --device "$DEVICE" "${BACKEND[@]}" --output "$out" --overwrite "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
    status=$?
    local verdict
    verdict=$("$PY" - "$out" "$want" "$DEVICE" "$status" <<'EOF'
import sys
sys.path.insert(0, ".")
from commbench.records import results
path, want, device, status = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
try:
    meta, records = results.read(path)
    records = results.final(records)  # --repeat: each size's whole record, not its windows
except (OSError, ValueError) as error:
    print(f"FAILED: exit {status}, no results file ({error})")
    sys.exit()
problems = []
if status != 0:
    problems.append(f"exit {status}")
if meta.get("device") != device:
    problems.append(f"device {meta.get('device')}")
ops = sorted({r["op"] for r in records})
if len(ops) != want:
    problems.append(f"{len(ops)} of {want} ops")
wrong = sum(r.get("wrong") or 0 for r in records)
if wrong:
    problems.append(f"{wrong} wrong elements")
if any(r["duration_s"] <= 0 for r in records):
    problems.append("a duration <= 0")
# The largest message measured and its time: device events make it plausible (at world size 1
# a collective is a local copy or nothing, so bandwidth figures say little here).
top = max(records, key=lambda r: (r["size_bytes"], r["duration_s"]), default=None)
summary = (f"{meta.get('backend')}, {len(records)} rows of {len(ops)} ops, {wrong} wrong"
           + (f", largest {top['op']} {top['size_bytes']} B in {top['duration_s'] * 1e6:.1f} us"
              if top else ""))
print(("FAILED: " + "; ".join(problems) + " (" + summary + ")") if problems else "ok: " + summary)
EOF
)
    case $verdict in ok:*) ;; *) FAILED=1; tail -n 3 "$WORK/$name.err" | sed 's/^/    /';; esac
    say "$(printf '%-34s' "$name") $verdict ($((SECONDS - started)) s)"
}

# World size 1: pt2pt needs two ranks and is skipped with a note; five ops run.
# GPU_CHECK_DISTS narrows the layers (the CPU test of this script runs deepspeed's alone).
for dist in ${GPU_CHECK_DISTS:-torch deepspeed}; do
    check "$dist scan --check --stats" 5 --dist "$dist" --scan --maxsize "$MAXSIZE" --check --stats
    check "$dist single size --check" 5 --dist "$dist" --mem-factor 0.05 --trials 20 --check
    check "$dist scan --async-op --check" 5 --dist "$dist" --scan --maxsize "$MAXSIZE" --async-op --check
    # The five more ops, --op, two dtypes, --repeat and --overlap (NCCL's stream beside the
    # compute's, timed with events): 10 ops at world size 1 (pt2pt needs two ranks).
    check "$dist --all --overlap --repeat 2" 10 --dist "$dist" --all --scan --maxsize "$MAXSIZE" \
        --check --op max --dtype float32,bfloat16 --repeat 2 --overlap --trials 10
    # all_to_allv (its splits' check on the device) with every trial checked; --split and
    # --pairs need more ranks than one GPU gives.
    check "$dist all_to_allv --check-every" 1 --dist "$dist" --all-to-allv --a2a-skew zipf:1.2 \
        --scan --maxsize "$MAXSIZE" --check-every --stats
done

if [ $FAILED = 0 ]; then say "all cases ok on $DEVICE"; else say "some cases FAILED on $DEVICE"; fi
exit $FAILED
