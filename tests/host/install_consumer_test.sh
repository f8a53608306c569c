#!/bin/sh
# Installs libspyre to a temporary prefix and builds the out-of-tree consumer against it, once
# through pkg-config and once through the CMake package, then runs both on the simulator.
# Usage: install_consumer_test.sh <cmake build dir> <consumer source dir>
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log"
lib=$(ls "$tmp"/prefix/lib*/libspyre.so.0 2>/dev/null || ls "$tmp"/prefix/lib/*/libspyre.so.0)
libdir=$(dirname "$lib")
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = libspyre.so.0 ] || { echo "SONAME is '$soname'"; exit 1; }
pcver=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion spyre)
hdrver=$(awk '/define SPYRE_API_VERSION_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' \
    "$tmp/prefix/include/spyre/spyre.h")
[ "$pcver" = "$hdrver" ] || { echo "spyre.pc version $pcver != spyre.h $hdrver"; exit 1; }
for f in spyre.h program_builder.hpp isa.hpp programs/matmul.hpp; do
    [ -f "$tmp/prefix/include/spyre/$f" ] || { echo "missing include/spyre/$f"; exit 1; }
done
# pkg-config
cp -r "$src" "$tmp/pc"
PKG_CONFIG_PATH="$libdir/pkgconfig" make -s -C "$tmp/pc" >"$tmp/make.log" 2>&1 ||
    { cat "$tmp/make.log"; exit 1; }
# CMake package
cmake -S "$src" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cm" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
export SPYRE_BACKEND=sim LD_LIBRARY_PATH="$libdir"
for exe in "$tmp/pc/consumer" "$tmp/pc/builder" "$tmp/cm/consumer" "$tmp/cm/builder"; do
    # the installed library, not the build tree's
    ldd "$exe" | grep -q "$libdir/libspyre.so.0" || { ldd "$exe"; exit 1; }
    "$exe"
done
echo "install + out-of-tree consumer: OK (libspyre $pcver)"
