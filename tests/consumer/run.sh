#!/bin/sh
# tests/consumer/run.sh PREFIX [SOURCE_TREE] — builds tests/consumer/main.c
# against the remat installed under PREFIX, as a user would, outside the
# source tree:
#   1. with pkg-config (shared library),
#   2. with pkg-config --static (libremat.a and its Libs.private/Requires.private),
#   3. with CMake's find_package(remat) -> remat::remat,
#   4. (given SOURCE_TREE) with add_subdirectory(SOURCE_TREE) -> remat::remat;
# main.c defines one of remat's internal names (a static link clashed before);
# and runs each.
set -eu
prefix=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
libdir=$(dirname "$libdir")
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
cc=${CC:-cc}
tree=${2:+$(cd "$2" && pwd)}
cp "$src/main.c" "$src/CMakeLists.txt" "$work/"
mkdir "$work/subdir" && cp "$src/subdir/CMakeLists.txt" "$work/subdir/"
cd "$work"

echo "== pkg-config: $cc main.c \$(pkg-config --cflags --libs remat)"
$cc -std=c11 -Wall -Werror -o consumer_pc main.c $(pkg-config --cflags --libs remat)
LD_LIBRARY_PATH="$libdir" ./consumer_pc

echo "== pkg-config --static: $cc main.c -Wl,-Bstatic -lremat -Wl,-Bdynamic + the rest of \$(pkg-config --static --libs remat)"
$cc -std=c11 -Wall -Werror -o consumer_static main.c $(pkg-config --cflags remat) \
  -L"$libdir" -Wl,-Bstatic -lremat -Wl,-Bdynamic $(pkg-config --static --libs remat | sed 's/-lremat//')
if ldd ./consumer_static | grep -q libremat; then echo "consumer_static links libremat.so"; exit 1; fi
./consumer_static

echo "== cmake: find_package(remat) -> remat::remat"
cmake -S . -B build -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build build >/dev/null
./build/consumer  # the imported target carries the library's path (RPATH)

if [ -n "$tree" ]; then
  echo "== cmake: add_subdirectory($tree) -> remat::remat"
  cmake -S subdir -B build-sub -DREMAT_TREE="$tree" >/dev/null
  cmake --build build-sub -j 2 >/dev/null
  ./build-sub/consumer
fi
