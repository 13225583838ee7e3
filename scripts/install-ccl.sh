#!/usr/bin/env bash
# scripts/install-ccl.sh [VENV]: the ccl backend of torch.distributed, for real, in VENV
# (default .venv): oneCCL from the package registry and Intel's torch bindings for it
# (oneccl_bindings_for_pytorch) built from source against the venv's torch, with this
# repository's CPU send/recv patch. `make ccl` runs it. A second run is a no-op.
#
#   TORCH_CCL_SRC   the bindings' source: a directory, a tarball or a git URL (default: the
#                   vendored tarball ../shared/vendor/torch-ccl-1fc0c38.tar.gz beside the
#                   repository when present, else https://github.com/intel/torch-ccl.git)
#   TORCH_CCL_REF   the commit a git URL is checked out at (default: 1fc0c38, the commit the
#                   patch is written for)
#   ONECCL_VERSION  oneCCL's version on the registry (default 2022.2.0)
#   MAX_JOBS        parallel compile jobs (default: every CPU)
#
# What it works around, once (docs/ccl.md says why):
#   - oneccl-cpu declares libfabric>=2.6, which no registry has: installed --no-deps, and
#     the system's libfabric (Debian: libfabric1) serves at run time (installed here when
#     missing and running as root with apt-get);
#   - its libccl.so.1 needs libccl.so.2, which only the full `oneccl` wheel ships: that one
#     file is taken from it;
#   - oneccl-cpu-devel brings the headers and ~210 MB of static libraries nobody links:
#     those are deleted;
#   - the bindings' CMake requires MPI, which they never call: an empty FindMPI stands in.
set -euo pipefail

say() { printf 'install-ccl: %s\n' "$*" >&2; }
die() { printf 'install-ccl: error: %s\n' "$*" >&2; exit 1; }

started=$(date +%s)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${1:-$ROOT/.venv}
[ -x "$VENV/bin/python" ] || die "$VENV is not a virtual environment (no bin/python); make venv first"
VENV=$(cd "$VENV" && pwd)  # absolute: the build below runs in the source's directory
PY=$VENV/bin/python
export PATH=$VENV/bin:$PATH  # the venv's ninja, for DeepSpeed's op below
PATCH=$ROOT/patches/torch-ccl-cpu-send-recv.patch
PATCHED_FOR=1fc0c383a8665a83f274e2c863e6d1d323b02856
VENDORED=$ROOT/../shared/vendor/torch-ccl-1fc0c38.tar.gz
ONECCL_VERSION=${ONECCL_VERSION:-2022.2.0}
if [ -z "${TORCH_CCL_SRC:-}" ]; then
    if [ -f "$VENDORED" ]; then
        TORCH_CCL_SRC=$(cd "$(dirname "$VENDORED")" && pwd)/$(basename "$VENDORED")
    else
        TORCH_CCL_SRC=https://github.com/intel/torch-ccl.git
    fi
fi
TORCH_CCL_REF=${TORCH_CCL_REF:-$PATCHED_FOR}
JOBS=${MAX_JOBS:-$(nproc 2>/dev/null || echo 2)}
STAMP=$VENV/.ccl-installed

TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) ||
    die "torch does not import in $VENV; install the project first (make venv)"
PREFIX=$("$PY" -c 'import sys; print(sys.prefix)')

# What was built, for the stamp: a change of any of these builds again.
case "$TORCH_CCL_SRC" in
    http://* | https://* | git://* | ssh://* | file://* | git@*) kind=git ;;
    *)
        if [ -d "$TORCH_CCL_SRC" ]; then kind=dir
        elif [ -f "$TORCH_CCL_SRC" ]; then kind=tarball
        else die "TORCH_CCL_SRC=$TORCH_CCL_SRC is not a directory, a tarball or a git URL"
        fi ;;
esac
case $kind in
    tarball) source_id="tarball $(sha256sum "$TORCH_CCL_SRC" | cut -d' ' -f1)" ;;
    dir) source_id="dir $(cd "$TORCH_CCL_SRC" && find . -type f -not -path './.git/*' \
            -not -path './build/*' -not -path './third_party/*' -print0 | sort -z |
            xargs -0 sha256sum | sha256sum | cut -d' ' -f1)" ;;
    git) source_id="git $TORCH_CCL_SRC@$TORCH_CCL_REF" ;;
esac
key=$(printf '%s\n' "oneccl $ONECCL_VERSION" "$source_id" "torch $TORCH_VERSION" \
      "patch $(sha256sum "$PATCH" | cut -d' ' -f1)" "script $(sha256sum "$0" | cut -d' ' -f1)" |
      sha256sum | cut -d' ' -f1)

import_check() {
    "$PY" - <<'EOF'
import torch
import torch.distributed as dist
import oneccl_bindings_for_pytorch as ccl
assert dist.is_backend_available("ccl"), "the ccl backend is not registered"
print(f"install-ccl: ok: oneccl_bindings_for_pytorch {ccl.__version__} imports with torch "
      f"{torch.__version__}; --backend ccl is available")
EOF
}

if [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$key" ] && import_check >/dev/null 2>&1; then
    say "the ccl backend is already installed in $VENV ($(sed -n 2p "$STAMP")); nothing to do"
    exit 0
fi

# ------------------------------------------------------------------ what the build needs
CXX_BIN=${CXX:-c++}
command -v "$CXX_BIN" >/dev/null || die "no C++ compiler ($CXX_BIN); install one (Debian: apt-get install g++)"
command -v "${CC:-cc}" >/dev/null || die "no C compiler (${CC:-cc}); install one (Debian: apt-get install gcc)"
command -v make >/dev/null || die "no make; install it (Debian: apt-get install make)"
command -v patch >/dev/null || command -v git >/dev/null || die "neither patch nor git is installed; install one"
[ $kind != git ] || command -v git >/dev/null || die "TORCH_CCL_SRC is a git URL and git is not installed"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/install-ccl.XXXXXX")
LOG=$VENV/install-ccl.log
trap 'rm -rf "$WORK"' EXIT
: > "$LOG"
run() {  # a step's output goes to the log; on failure its tail is shown
    if ! "$@" >> "$LOG" 2>&1; then
        tail -n 30 "$LOG" >&2
        die "failed: $* (the whole log: $LOG)"
    fi
}

if ! command -v cmake >/dev/null; then
    say "cmake is missing: taking it from the registry for this build only"
    run "$PY" -m pip install --quiet --target "$WORK/cmake" cmake
    export PYTHONPATH=$WORK/cmake${PYTHONPATH:+:$PYTHONPATH} PATH=$WORK/cmake/bin:$PATH
fi
if ! "$PY" -c 'import setuptools.command.bdist_wheel' 2>/dev/null; then
    run "$PY" -m pip install --quiet setuptools wheel
fi

# ------------------------------------------------------------------ libfabric (run time)
if ! "$PY" -c 'import ctypes; ctypes.CDLL("libfabric.so.1")' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "libfabric is missing: installing Debian's libfabric1"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libfabric1 \
            >> "$LOG" 2>&1 || true
        if ! "$PY" -c 'import ctypes; ctypes.CDLL("libfabric.so.1")' 2>/dev/null; then
            run apt-get update
            run env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libfabric1
        fi
    else
        die "libfabric.so.1 is missing and oneCCL needs it at run time; install it as root (Debian/Ubuntu: apt-get install libfabric1) and run this again"
    fi
fi

# ------------------------------------------------------------------ oneCCL from the registry
say "oneCCL $ONECCL_VERSION from the registry into $VENV"
run "$PY" -m pip install --no-deps "oneccl-cpu==$ONECCL_VERSION" "oneccl-cpu-devel==$ONECCL_VERSION"
rm -f "$PREFIX/lib/libccl.a" "$PREFIX/lib/ccl/cpu/lib/libccl.a"
rmdir -p "$PREFIX/lib/ccl/cpu/lib" 2>/dev/null || true
if [ ! -e "$PREFIX/lib/libccl.so.2" ]; then
    run "$PY" -m pip download --no-deps --only-binary=:all: --dest "$WORK/wheel" "oneccl==$ONECCL_VERSION"
    run "$PY" - "$WORK/wheel" "$PREFIX/lib/libccl.so.2" <<'EOF'
import pathlib, shutil, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("oneccl-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith("/lib/libccl.so.2.0"))
    with archive.open(name) as source, open(sys.argv[2], "wb") as target:
        shutil.copyfileobj(source, target)
pathlib.Path(sys.argv[2]).chmod(0o755)
EOF
fi
"$PY" -c "import ctypes; ctypes.CDLL('$PREFIX/lib/libccl.so.1')" 2>>"$LOG" ||
    die "oneCCL's libccl.so.1 does not load (see $LOG)"

# ------------------------------------------------------------------ the bindings' source
say "the bindings' source: $TORCH_CCL_SRC ($kind)"
case $kind in
    tarball)
        mkdir "$WORK/unpacked"
        run tar -xf "$TORCH_CCL_SRC" -C "$WORK/unpacked"
        top=$(dirname "$(find "$WORK/unpacked" -maxdepth 2 -name setup.py | head -n1)")
        [ -n "$top" ] && [ "$top" != . ] || die "$TORCH_CCL_SRC holds no setup.py"
        mv "$top" "$WORK/src" ;;
    dir)
        mkdir "$WORK/src"
        run cp -a "$TORCH_CCL_SRC/." "$WORK/src"
        rm -rf "$WORK/src/build" ;;
    git)
        run git clone --quiet "$TORCH_CCL_SRC" "$WORK/src"
        run git -C "$WORK/src" checkout --quiet "$TORCH_CCL_REF" ;;
esac
[ -f "$WORK/src/setup.py" ] && [ -f "$WORK/src/src/cpu/cpu_ccl.cpp" ] ||
    die "$TORCH_CCL_SRC does not look like intel/torch-ccl (no setup.py or src/cpu/cpu_ccl.cpp)"

apply_patch() {  # $1: --dry-run or nothing
    if command -v patch >/dev/null; then
        patch -p1 -N -s -r - -d "$WORK/src" ${1:+"$1"} < "$PATCH"
    else
        (cd "$WORK/src" && GIT_CEILING_DIRECTORIES=$WORK git apply ${1:+--check} "$PATCH")
    fi
}
if apply_patch --dry-run >> "$LOG" 2>&1; then
    apply_patch >> "$LOG" 2>&1
    say "applied $(basename "$PATCH") (send and recv on CPU tensors)"
elif grep -q 'VanillaCPU::send_' "$WORK/src/src/cpu/cpu_ccl.cpp"; then
    say "this source has CPU send/recv already; $(basename "$PATCH") not applied"
else
    where=$TORCH_CCL_SRC
    [ $kind != git ] || where+="@$TORCH_CCL_REF"
    die "$(basename "$PATCH") does not apply to $where; it is written for intel/torch-ccl ${PATCHED_FOR:0:7}"
fi

# ------------------------------------------------------------------ build and install
mkdir "$WORK/cmake-mpi"
cat > "$WORK/cmake-mpi/FindMPI.cmake" <<'EOF'
# The bindings call no MPI: find_package(MPI REQUIRED) finds nothing to link.
set(MPI_FOUND TRUE)
set(MPI_LIBRARIES "")
EOF
say "building oneccl_bindings_for_pytorch against torch $TORCH_VERSION ($JOBS jobs; a few minutes)"
build_started=$(date +%s)
(
    cd "$WORK/src"
    unset COMPUTE_BACKEND
    export CCL_ROOT=$PREFIX USE_SYSTEM_ONECCL=1 CMAKE_MODULE_PATH=$WORK/cmake-mpi MAX_JOBS=$JOBS
    run "$PY" -m pip install --no-deps --no-build-isolation --no-cache-dir .
)
say "built and installed in $(( $(date +%s) - build_started )) s"

# DeepSpeed builds its own oneCCL op (deepspeed_ccl_comm) the first time --dist deepspeed runs
# on ccl; built here once, where the suite looks for it, instead of in the first run.
if "$PY" -c 'import deepspeed' >/dev/null 2>&1; then
    say "building DeepSpeed's oneCCL op once (about a minute or two)"
    op_started=$(date +%s)
    run env CCL_ROOT="$PREFIX" CPATH="$PREFIX/include${CPATH:+:$CPATH}" DS_ACCELERATOR=cpu \
        TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$VENV/torch_extensions}" "$PY" -c '
import oneccl_bindings_for_pytorch
from deepspeed.ops.op_builder.cpu import CCLCommBuilder
CCLCommBuilder().load(verbose=False)'
    say "DeepSpeed's oneCCL op built in $(( $(date +%s) - op_started )) s"
fi

import_check >&2 2>>"$LOG" || die "oneccl_bindings_for_pytorch was installed but does not import (see $LOG)"
printf '%s\n%s\n' "$key" "oneCCL $ONECCL_VERSION, bindings from $TORCH_CCL_SRC, torch $TORCH_VERSION" > "$STAMP"
rm -f "$LOG"
say "done in $(( $(date +%s) - started )) s"
