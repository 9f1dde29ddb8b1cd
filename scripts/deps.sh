#!/bin/sh
# Installs (as root) or requests (otherwise) the Debian packages remat needs.
# `deps.sh lint` also wants clang-tidy (for `make lint`), `deps.sh format`
# clang-format (for `make format`).
set -e
PKGS="cmake make gcc clang libomp-dev libdnnl-dev libopenblas-dev libcriterion-dev zlib1g-dev libcjson-dev libpcre2-dev pkg-config libopenmpi-dev openmpi-bin"
[ "${1:-}" = "lint" ] && PKGS="$PKGS clang-tidy clang-format"
[ "${1:-}" = "format" ] && PKGS="$PKGS clang-format"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "remat: installing Debian packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing
else
  echo "remat: missing Debian packages:$missing" >&2
  echo "remat: install them with:  sudo apt-get install -y$missing" >&2
  exit 1
fi
