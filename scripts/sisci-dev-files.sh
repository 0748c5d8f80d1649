#!/usr/bin/env bash
# Write the files that tell build systems where libsisci is installed:
#   ROOT/PREFIX/LIBDIR/pkgconfig/sisci.pc
#   ROOT/PREFIX/CMAKEDIR/SISCIConfig.cmake, SISCIConfigVersion.cmake
# from pkgconfig/sisci.pc.in and cmake/*.cmake.in.  PREFIX is the prefix the
# files name (where the library is used from); ROOT is where they are written
# (DESTDIR; empty for the real place).  LIBDIR is lib or lib64; CMAKEDIR is
# lib/cmake/SISCI or share/cmake/SISCI (three levels below the prefix: the
# CMake file finds the prefix from its own place).  Prints each file written.
# Used by the Makefile (stage, install) and scripts/install-dis.sh.
#
#   sisci-dev-files.sh ROOT PREFIX LIBDIR CMAKEDIR VERSION
set -euo pipefail

if [ $# -ne 5 ]; then
    echo "usage: $0 ROOT PREFIX LIBDIR CMAKEDIR VERSION" >&2
    exit 2
fi
root=$1 prefix=$2 libdir=$3 cmakedir=$4 version=$5
case "$cmakedir" in
    */*/*/*|/*) echo "$0: CMAKEDIR must be three levels below the prefix (got $cmakedir)" >&2; exit 2 ;;
    */*/*) ;;
    *) echo "$0: CMAKEDIR must be three levels below the prefix (got $cmakedir)" >&2; exit 2 ;;
esac
src=$(cd "$(dirname "$0")/.." && pwd)

# sisci.pc gives programs an rpath to the library, except where the loader
# looks anyway (/usr/lib/<multiarch> of the Debian packages, /usr/lib, /lib):
# an rpath to a system directory only gets in the way of the distribution's
# tools (lintian's custom-library-search-path on the programs built with it).
rpath=(-e "s|@RPATH@|-Wl,-rpath,\${libdir} |")
case "$prefix/$libdir" in
    /usr/lib|/lib|/usr/lib64|/lib64|/usr/lib/*-linux-gnu*|/lib/*-linux-gnu*) rpath=(-e "s|@RPATH@||") ;;
esac

subst() {
    sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@VERSION@|$version|g" "${rpath[@]}" "$1" > "$2.tmp"
    chmod 0644 "$2.tmp"
    mv "$2.tmp" "$2"
    echo "$2"
}

install -d "$root$prefix/$libdir/pkgconfig" "$root$prefix/$cmakedir"
subst "$src/pkgconfig/sisci.pc.in" "$root$prefix/$libdir/pkgconfig/sisci.pc"
subst "$src/cmake/SISCIConfig.cmake.in" "$root$prefix/$cmakedir/SISCIConfig.cmake"
subst "$src/cmake/SISCIConfigVersion.cmake.in" "$root$prefix/$cmakedir/SISCIConfigVersion.cmake"
