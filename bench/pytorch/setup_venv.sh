#!/bin/sh
# bench/pytorch/setup_venv.sh — a current PyTorch 2.x in a virtual environment, the yardstick
# for bench/pytorch/ besides Debian's python3-torch 1.13. Not run by CI or `make test`.
#
#   bench/pytorch/setup_venv.sh [DIR]        # default DIR: ../venv-torch2 beside the repository
#   DIR/bin/python bench/pytorch/compare.py --python DIR/bin/python ...
#
# Installs the CPU wheel from PyTorch's own index when it can be reached, else the wheel from
# PyPI (on x86-64 Linux that one is built with CUDA and pulls its NVIDIA libraries, ~3 GiB;
# the CUDA part stays unused on a CPU-only machine). TORCH_SPEC picks a version ("torch==2.5.1").
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/../../../venv-torch2}
py=${PYTHON:-/usr/bin/python3}
spec=${TORCH_SPEC:-torch}
"$py" -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --upgrade pip
if "$dir/bin/python" -m pip install --index-url https://download.pytorch.org/whl/cpu "$spec" 2>/dev/null; then
    echo "setup_venv: installed $spec (CPU wheel, download.pytorch.org)"
else
    echo "setup_venv: PyTorch's CPU index not reachable; installing $spec from PyPI"
    "$dir/bin/python" -m pip install "$spec"
fi
# numpy: torch.compile's inductor and torch.utils.checkpoint work without it, but torch warns
"$dir/bin/python" -m pip install --quiet numpy || true
"$dir/bin/python" -c 'import torch; print("setup_venv: torch", torch.__version__, "in", torch.__file__)'
