#!/bin/sh
# scripts/fetch_cudnn_frontend.sh [DEST] — the headers of the cudnn-frontend (cuDNN's
# header-only C++ graph API, which PyTorch's and llm.c's cuDNN attention use) for remat's
# optional cuDNN attention (src/backends/cuda/attention_cudnn.cu, docs/cuda.md): pip
# downloads PyPI's nvidia-cudnn-frontend wheel (nothing is installed) and its include/ is
# unpacked into DEST, by default .gpu/cudnn_frontend/include, where CMake's
# REMAT_CUDNN_FRONTEND_INCLUDE looks (.gpu/ is ignored and travels to the GPU machine:
# bench/cuda/gpu_prepare.sh runs this). Nothing of it is committed.
# Environment: CUDNN_FRONTEND_VERSION (default 1.32.0, the version remat was built with),
# CUDNN_FRONTEND_WHEEL (a wheel already downloaded: no pip).
set -eu
cd "$(git rev-parse --show-toplevel)"
dest=${1:-.gpu/cudnn_frontend/include}
ver=${CUDNN_FRONTEND_VERSION:-1.32.0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "${CUDNN_FRONTEND_WHEEL:-}" ]; then
  cp "$CUDNN_FRONTEND_WHEEL" "$tmp/"
else
  # the headers are the same in every wheel: ask for one (CPython 3.11, manylinux x86-64)
  # whatever this machine's python is
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --dest "$tmp" "nvidia-cudnn-frontend==$ver" || {
    echo "fetch_cudnn_frontend: pip could not download nvidia-cudnn-frontend==$ver (network?" \
      "CUDNN_FRONTEND_WHEEL=/path/to/the.whl uses one already downloaded)" >&2
    exit 1
  }
fi
whl=$(ls "$tmp"/nvidia_cudnn_frontend-*.whl | head -1)
rm -rf "$dest"
mkdir -p "$dest"
# only include/ (the wheel's Python package and its libraries are not needed)
python3 - "$whl" "$dest" <<'EOF'
import os, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/") and not n.endswith("/")]
    for n in names:
        out = os.path.join(dest, n[len("include/"):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(n) as src, open(out, "wb") as dst:
            dst.write(src.read())
print(f"fetch_cudnn_frontend: {len(names)} headers of {os.path.basename(whl)} in {dest}")
EOF
[ -f "$dest/cudnn_frontend.h" ] || { echo "fetch_cudnn_frontend: no cudnn_frontend.h in the wheel" >&2; exit 1; }
