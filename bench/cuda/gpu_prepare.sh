#!/bin/sh
# bench/cuda/gpu_prepare.sh — run HERE (the Debian development machine), once, before the
# GPU session: puts into .gpu/ (ignored through .git/info/exclude) what the GPU machine
# lacks to build and test remat, since it has no Debian -dev packages and no network:
#   .gpu/include/criterion/...   Criterion's headers          (libcriterion-dev)
#   .gpu/include/zlib.h zconf.h  zlib's headers               (zlib1g-dev)
#   .gpu/lib/libcriterion.so*    Criterion and every library it needs but glibc's
#   .gpu/lib/libz.so             the link-time name of zlib
#   .gpu/include/cjson/, pcre2.h cJSON's and PCRE2's headers  (libcjson-dev, libpcre2-dev)
#   .gpu/lib/libcjson.so*, libpcre2-8.so*  and their libraries
#   .gpu/cudnn_frontend/include/ the cudnn-frontend's headers (PyPI's nvidia-cudnn-frontend,
#                                scripts/fetch_cudnn_frontend.sh): the carried build's cuDNN
#                                attention (REMAT_CUDA_ATTENTION=cudnn, docs/cuda.md)
# About 8 MiB. gpu_session.sh points CMake at it (CMAKE_PREFIX_PATH). The device tool's call then names ".gpu" in `carry` (docs/cuda.md).
set -eu
cd "$(git rev-parse --show-toplevel)"
dst=.gpu
rm -rf "$dst"
mkdir -p "$dst/include" "$dst/lib"
crit=$(find /usr/lib /lib -name 'libcriterion.so.*' 2>/dev/null | head -1)
[ -n "$crit" ] && [ -d /usr/include/criterion ] || {
  echo "gpu_prepare: Criterion not installed here (apt-get install libcriterion-dev)" >&2
  exit 1
}
[ -f /usr/include/zlib.h ] || { echo "gpu_prepare: apt-get install zlib1g-dev" >&2; exit 1; }
cp -r /usr/include/criterion "$dst/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$dst/include/"
soname=$(objdump -p "$crit" | awk '/SONAME/ {print $2}')
cp -L "$crit" "$dst/lib/$soname"
ln -sf "$soname" "$dst/lib/libcriterion.so"
# Criterion's own dependencies (libgit2, nanomsg, mbedtls, ...), glibc's libraries left out
ldd "$crit" | awk '/=> \// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|ld-linux*) ;;
    *) cp -L "$lib" "$dst/lib/" ;;
  esac
done
zlib=$(ldd "$crit" | awk '/libz\.so/ {print $3}')
[ -n "$zlib" ] || zlib=$(find /usr/lib /lib -name 'libz.so.1' | head -1)
cp -L "$zlib" "$dst/lib/libz.so.1"
ln -sf libz.so.1 "$dst/lib/libz.so"
# cJSON and PCRE2 (the library's JSON and regex dependencies)
for h in /usr/include/cjson/cJSON.h /usr/include/pcre2.h; do
  [ -f "$h" ] || { echo "gpu_prepare: $h missing (apt-get install libcjson-dev libpcre2-dev)" >&2; exit 1; }
done
cp -r /usr/include/cjson "$dst/include/"
cp /usr/include/pcre2.h "$dst/include/"
for name in libcjson.so libpcre2-8.so; do
  lib=$(find /usr/lib /lib -name "$name" 2>/dev/null | head -1)
  [ -n "$lib" ] || { echo "gpu_prepare: $name not found" >&2; exit 1; }
  real=$(readlink -f "$lib")
  so=$(objdump -p "$real" | awk '/SONAME/ {print $2}')
  cp -L "$real" "$dst/lib/$so"
  ln -sf "$so" "$dst/lib/$name"
done
# optional: without it the build says so and the window's cudnn step falls back
sh scripts/fetch_cudnn_frontend.sh "$dst/cudnn_frontend/include" ||
  echo "gpu_prepare: no cudnn-frontend headers: the build will have no cuDNN attention" >&2
ex="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$ex")"
grep -qx '/.gpu/' "$ex" 2>/dev/null || echo '/.gpu/' >> "$ex"
du -sh "$dst"
