#!/usr/bin/env bash
# Install vsci's libsisci in Dolphin's layout, or remove that install again.
# Run through `make install-dis` / `make uninstall-dis`, which set:
#   BUILD       the staged build (`make` output): BUILD/lib, BUILD/include
#   DIS_PREFIX  Dolphin's prefix, /opt/DIS by default
#   DESTDIR     staging root prepended to every path written (packaging,
#               tests); with it set, ldconfig is not run
#   LDSO_CONF   the loader entry, /etc/ld.so.conf.d/00-vsci-dis.conf by default;
#               empty: no entry and no ldconfig
#   FORCE       1: install over files that are not from an earlier
#               install-dis (for example Dolphin's own libsisci)
#   VERSION     the version the pkg-config and CMake files carry
#
# What goes where (DIS_PREFIX=/opt/DIS):
#   /opt/DIS/include/        sisci_api.h sisci_types.h sisci_error.h
#   /opt/DIS/include/dis/    dis_types.h
#   /opt/DIS/lib64/          libsisci.so libsisci.a
#   /opt/DIS/lib64/pkgconfig/sisci.pc
#   /opt/DIS/share/cmake/SISCI/           SISCIConfig.cmake (share/, not
#                                         lib64/: CMake on Debian does not
#                                         look in lib64/)
#   /opt/DIS/share/vsci/installed-files   the list uninstall removes
#   /etc/ld.so.conf.d/00-vsci-dis.conf    "/opt/DIS/lib64", then ldconfig.
#                                         "00-" because the loader takes the
#                                         first libsisci.so the cache lists,
#                                         in the order of these files: a
#                                         program linked against /opt/DIS
#                                         then loads that library even when
#                                         `make install` put another one in
#                                         /usr/local/lib (libc.conf).
# vscid and vsci are not installed here: they stay where `make install` (or
# the build) put them.  Uninstall removes exactly the listed files, then the
# directories under DIS_PREFIX (DIS_PREFIX too) that are left empty.
#
#   install-dis.sh install | uninstall
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${BUILD:-$here/../build}
DIS_PREFIX=${DIS_PREFIX:-/opt/DIS}
DESTDIR=${DESTDIR:-}
LDSO_CONF=${LDSO_CONF-/etc/ld.so.conf.d/00-vsci-dis.conf}
FORCE=${FORCE:-}
VERSION=${VERSION:-0.0.0}

case "$DIS_PREFIX" in
    /*) ;;
    *) echo "install-dis: DIS_PREFIX must be an absolute path (got '$DIS_PREFIX')" >&2; exit 2 ;;
esac
DIS_PREFIX=${DIS_PREFIX%/}
root=$DESTDIR$DIS_PREFIX
manifest=$DIS_PREFIX/share/vsci/installed-files

headers=(sisci_api.h sisci_types.h sisci_error.h)
dis_headers=(dis_types.h)
libs=(libsisci.so libsisci.a)

# Every file install writes, as the running system sees it (no DESTDIR).
planned() {
    local f
    for f in "${headers[@]}"; do echo "$DIS_PREFIX/include/$f"; done
    for f in "${dis_headers[@]}"; do echo "$DIS_PREFIX/include/dis/$f"; done
    for f in "${libs[@]}"; do echo "$DIS_PREFIX/lib64/$f"; done
    echo "$DIS_PREFIX/lib64/pkgconfig/sisci.pc"
    echo "$DIS_PREFIX/share/cmake/SISCI/SISCIConfig.cmake"
    echo "$DIS_PREFIX/share/cmake/SISCI/SISCIConfigVersion.cmake"
    if [ -n "$LDSO_CONF" ]; then echo "$LDSO_CONF"; fi
}

run_ldconfig() {
    if [ -z "$DESTDIR" ] && [ -n "$LDSO_CONF" ]; then
        echo "install-dis: ldconfig"
        ldconfig
    fi
}

do_install() {
    local f
    for f in "${libs[@]}"; do
        [ -f "$BUILD/lib/$f" ] || { echo "install-dis: $BUILD/lib/$f is missing: run make first" >&2; exit 1; }
    done
    for f in "${headers[@]}"; do
        [ -f "$BUILD/include/$f" ] || { echo "install-dis: $BUILD/include/$f is missing: run make first" >&2; exit 1; }
    done
    # Never overwrite someone else's files (Dolphin's own install) unasked.
    if [ ! -f "$DESTDIR$manifest" ] && [ "$FORCE" != 1 ]; then
        local taken=()
        while read -r f; do
            if [ -e "$DESTDIR$f" ]; then taken+=("$DESTDIR$f"); fi
        done < <(planned)
        if [ ${#taken[@]} -gt 0 ]; then
            echo "install-dis: these files exist and are not from an earlier install-dis:" >&2
            printf '  %s\n' "${taken[@]}" >&2
            echo "install-dis: is Dolphin's software installed here? Nothing was changed." >&2
            echo "install-dis: choose another DIS_PREFIX, or run with FORCE=1 to replace them." >&2
            exit 1
        fi
    fi

    install -d "$root/include/dis" "$root/lib64" "$DESTDIR$(dirname "$manifest")"
    for f in "${headers[@]}"; do install -m 0644 "$BUILD/include/$f" "$root/include/$f"; done
    for f in "${dis_headers[@]}"; do install -m 0644 "$BUILD/include/dis/$f" "$root/include/dis/$f"; done
    install -m 0755 "$BUILD/lib/libsisci.so" "$root/lib64/libsisci.so"
    install -m 0644 "$BUILD/lib/libsisci.a" "$root/lib64/libsisci.a"
    "$here/sisci-dev-files.sh" "$DESTDIR" "$DIS_PREFIX" lib64 share/cmake/SISCI "$VERSION" > /dev/null
    if [ -n "$LDSO_CONF" ]; then
        install -d "$DESTDIR$(dirname "$LDSO_CONF")"
        echo "$DIS_PREFIX/lib64" > "$DESTDIR$LDSO_CONF.tmp"
        chmod 0644 "$DESTDIR$LDSO_CONF.tmp"
        mv "$DESTDIR$LDSO_CONF.tmp" "$DESTDIR$LDSO_CONF"
    fi
    {
        echo "# Files of vsci's make install-dis; make uninstall-dis removes them."
        planned
    } > "$DESTDIR$manifest"
    run_ldconfig
    if [ -z "$DESTDIR" ] && [ -n "$LDSO_CONF" ]; then
        # Other copies stay in the cache, behind this one: say so, since a
        # program linked against them without an rpath now loads ours.
        local others
        others=$(ldconfig -p | sed -n 's/^[[:space:]]*libsisci\.so[[:space:]].*=> //p' | grep -v "^$DIS_PREFIX/lib64/" || true)
        if [ -n "$others" ]; then
            echo "install-dis: note: the loader cache also lists, after $DIS_PREFIX/lib64:"
            printf '  %s\n' $others
        fi
    fi
    echo "install-dis: libsisci and the SISCI headers are in $root (list: $DESTDIR$manifest)"
}

do_uninstall() {
    local f d
    if [ ! -f "$DESTDIR$manifest" ]; then
        echo "install-dis: no $DESTDIR$manifest: nothing of vsci's is installed in $root"
        return 0
    fi
    local dirs=()
    while read -r f; do
        case "$f" in ''|'#'*) continue ;; esac
        rm -f "$DESTDIR$f"
        dirs+=("$(dirname "$f")")
    done < "$DESTDIR$manifest"
    rm -f "$DESTDIR$manifest"
    dirs+=("$(dirname "$manifest")")
    # Remove the directories left empty, deepest first, up to DIS_PREFIX.
    for d in "${dirs[@]}"; do
        while case "$d/" in "$DIS_PREFIX"/*) true ;; *) false ;; esac; do
            rmdir "$DESTDIR$d" 2>/dev/null || break
            [ "$d" = "$DIS_PREFIX" ] && break
            d=$(dirname "$d")
        done
    done
    run_ldconfig
    echo "install-dis: removed vsci's libsisci and headers from $root"
}

case "${1:-}" in
    install) do_install ;;
    uninstall) do_uninstall ;;
    *) echo "usage: $0 install | uninstall" >&2; exit 2 ;;
esac
