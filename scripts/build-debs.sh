#!/usr/bin/env bash
# Build vsci's Debian packages from the tree: `make deb` (docs/packages.md).
#
#   vsci          vscid, vsci, the systemd unit, the sysusers entry, examples,
#                 /etc/vsci/vscid.env, man pages (help2man from --help)
#   libsisci      libsisci.so (soname libsisci.so)
#   libsisci-dev  headers, libsisci.a, sisci.pc, the CMake package
#   vsci-dis      Dolphin's layout: /opt/DIS (links into libsisci-dev and
#                 libsisci) and the loader entry, as `make install-dis` lays
#                 it out
#
# The files come from `make install DESTDIR=... PREFIX=/usr` and `make
# install-dis DESTDIR=...` of what `make` built (this script builds
# nothing); control files from dist/deb/; dependencies from dpkg-shlibdeps;
# control data from dpkg-gencontrol; the packages from dpkg-deb.  Set by
# the Makefile:
#   BUILD           the staged build (`make` output)
#   VERSION         vsci's version (Cargo.toml)
#   DEB_OUT         where the .deb files go (default BUILD/deb)
# Optional:
#   DEB_VERSION     the packages' version (default VERSION; a native package)
#   DEB_MAINTAINER  the Maintainer field
#   DEB_WORK        the scratch directory (default BUILD/deb-work; emptied)
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$src/build}
VERSION=${VERSION:?VERSION is not set: run through make deb}
DEB_OUT=${DEB_OUT:-$BUILD/deb}
DEB_VERSION=${DEB_VERSION:-$VERSION}
DEB_MAINTAINER=${DEB_MAINTAINER:-vsci maintainers <maintainers@users.noreply.a-seed-739292f0.example>}
PACKAGES=(vsci libsisci libsisci-dev vsci-dis)

for tool in dpkg-deb dpkg-gencontrol dpkg-shlibdeps dpkg-architecture help2man strip gzip; do
    command -v "$tool" >/dev/null || { echo "make deb: $tool is missing: run scripts/install-deps.sh" >&2; exit 1; }
done
for f in bin/vscid bin/vsci lib/libsisci.so lib/libsisci.a; do
    [ -f "$BUILD/$f" ] || { echo "make deb: $BUILD/$f is missing: run make first" >&2; exit 1; }
done

ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# Reproducible: file times and the changelog date are the last commit's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$src" log -1 --format=%ct 2>/dev/null || date +%s)}
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)

work=${DEB_WORK:-$BUILD/deb-work}
rm -rf "$work"
mkdir -p "$work/debian" "$DEB_OUT"
root=$work/install
dis=$work/install-dis
deb=$work/debian

make_() {
    make --no-print-directory -C "$src" "BUILD=$BUILD" "$@" >/dev/null
}

# 1. The files, as make installs them.
make_ -o all -o c -o stage install DESTDIR="$root" PREFIX=/usr LIBDIR="lib/$ma" CMAKEDIR=share/cmake/SISCI
make_ install-dis DESTDIR="$dis" DIS_PREFIX=/opt/DIS

# 2. Each file to its package.
move() {
    local pkg=$1 p
    shift
    for p in "$@"; do
        [ -e "$root/$p" ] || { echo "make deb: make install did not install /$p" >&2; exit 1; }
        install -d "$deb/$pkg/$(dirname "$p")"
        mv "$root/$p" "$deb/$pkg/$p"
    done
}
move vsci usr/bin/vscid usr/bin/vsci usr/lib/systemd/system/vscid.service usr/lib/sysusers.d/vsci.conf \
    usr/share/vsci usr/share/doc/vsci
move libsisci "usr/lib/$ma/libsisci.so"
move libsisci-dev usr/include "usr/lib/$ma/libsisci.a" "usr/lib/$ma/pkgconfig" usr/share/cmake
left=$(find "$root" -not -type d | sed "s|^$root||")
if [ -n "$left" ]; then
    echo "make deb: make install installed files no package holds (add them to scripts/build-debs.sh):" >&2
    echo "$left" >&2
    exit 1
fi

# The service's settings, a conffile the unit reads.
install -D -m 0644 "$src/dist/vscid.env" "$deb/vsci/etc/vsci/vscid.env"

# Dolphin's layout: install-dis's files, except that the headers and the
# libraries are links to libsisci-dev's and libsisci's (one copy of the
# library on the system); sisci.pc, the CMake package and the loader entry
# are install-dis's own.  Its list of files is the preinst's list of files
# not to overwrite, and is not shipped (uninstall-dis would remove ours).
manifest=/opt/DIS/share/vsci/installed-files
dis_files=$(grep -v '^#' "$dis$manifest")
for f in $dis_files; do
    install -d "$deb/vsci-dis/$(dirname "$f")"
    case "$f" in
        /opt/DIS/include/*) target=/usr/include/${f#/opt/DIS/include/} ;;
        /opt/DIS/lib64/libsisci.*) target=/usr/lib/$ma/${f#/opt/DIS/lib64/} ;;
        *) target= ;;
    esac
    if [ -n "$target" ]; then
        if [ ! -e "$deb/libsisci$target" ] && [ ! -e "$deb/libsisci-dev$target" ]; then
            echo "make deb: $f would link to $target, which no package holds" >&2
            exit 1
        fi
        ln -s "$target" "$deb/vsci-dis$f"
    else
        mv "$dis$f" "$deb/vsci-dis$f"
    fi
done

# 3. Strip as dh_strip does (the debug information stays in build/).
strip --remove-section=.comment --remove-section=.note "$deb/vsci/usr/bin/vscid" "$deb/vsci/usr/bin/vsci"
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$deb/libsisci/usr/lib/$ma/libsisci.so"
chmod 0644 "$deb/libsisci/usr/lib/$ma/libsisci.so"   # Policy 8.1: shared libraries are not executable
strip --strip-debug --remove-section=.comment --remove-section=.note --enable-deterministic-archives \
    "$deb/libsisci-dev/usr/lib/$ma/libsisci.a"

# 4. Man pages from --help (help2man); vsci's lists each subcommand's help.
mandir=$deb/vsci/usr/share/man
install -d "$mandir/man1" "$mandir/man8"
help_of() { # PROGRAM [SUBCOMMAND...]: the help text, COLUMNS-independent
    COLUMNS=80 "$@" --help 2>/dev/null
}
subcommands() { # PROGRAM [SUBCOMMAND...]: the subcommands the help lists
    help_of "$@" | sed -n '/^Commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z0-9-]*\) .*/\1/p' | grep -vx help || true
}
commands_section() { # PROGRAM [SUBCOMMAND...]: roff for every subcommand, depth first
    local c
    for c in $(subcommands "$@"); do
        echo ".SS \"${*:2} $c\"" | sed 's/" /"/'
        echo ".nf"
        help_of "$@" "$c" | sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\\&'/"
        echo ".fi"
        commands_section "$@" "$c"
    done
}
vsci=$deb/vsci/usr/bin/vsci
{
    echo "[COMMANDS]"
    echo "Each command's own help (\\fBvsci\\fR \\fICOMMAND\\fR \\fB\\-\\-help\\fR):"
    commands_section "$vsci"
    echo "[SEE ALSO]"
    echo ".BR vscid (8)."
    echo "The documentation in /usr/share/doc/vsci (cli.md, operations.md, cluster.md, security.md)."
} > "$work/vsci.h2m"
{
    echo "[FILES]"
    echo ".TP"
    echo "/usr/lib/systemd/system/vscid.service"
    echo "the service (not enabled by the package)"
    echo ".TP"
    echo "/etc/vsci/vscid.env"
    echo "its settings: VSCI_NODE_ID, VSCID_OPTS"
    echo ".TP"
    echo "/run/vsci/vscid.sock"
    echo "the service's control socket (group vsci)"
    echo "[SEE ALSO]"
    echo ".BR vsci (1)."
    echo "The documentation in /usr/share/doc/vsci (operations.md, cli.md, cluster.md, security.md)."
} > "$work/vscid.h2m"
COLUMNS=80 help2man --no-info --no-discard-stderr --section 1 --name "software SISCI interconnect: node status, demo, benchmarks, guests" \
    --version-string "$VERSION" --include "$work/vsci.h2m" --output "$mandir/man1/vsci.1" "$vsci"
COLUMNS=80 help2man --no-info --no-discard-stderr --section 8 --name "vsci node daemon: serves the SISCI API to the processes of one host" \
    --version-string "$VERSION" --include "$work/vscid.h2m" --output "$mandir/man8/vscid.8" "$deb/vsci/usr/bin/vscid"
gzip -9n "$mandir/man1/vsci.1" "$mandir/man8/vscid.8"

# 5. Every package's documentation directory: copyright and changelog.
date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
first=$( (git -C "$src" log --reverse --format=%ad --date=format:%Y 2>/dev/null || true) | sed -n 1p)
last=$(date -u +%Y -d "@$SOURCE_DATE_EPOCH")
years=${first:-$last}
if [ "$years" != "$last" ]; then years="$years-$last"; fi
cat > "$deb/changelog" <<EOF
vsci ($DEB_VERSION) unstable; urgency=medium

  * Built from the vsci tree (commit $commit) by make deb.

 -- $DEB_MAINTAINER  $date
EOF
for p in "${PACKAGES[@]}"; do
    install -d "$deb/$p/usr/share/doc/$p"
    sed "s|@YEARS@|$years|" "$src/dist/deb/copyright" > "$deb/$p/usr/share/doc/$p/copyright"
    gzip -9n < "$deb/changelog" > "$deb/$p/usr/share/doc/$p/changelog.gz"
    if [ -f "$src/dist/deb/$p.lintian-overrides" ]; then
        install -D -m 0644 "$src/dist/deb/$p.lintian-overrides" "$deb/$p/usr/share/lintian/overrides/$p"
    fi
done

# 6. Control files.
sed "s|@MAINTAINER@|$DEB_MAINTAINER|" "$src/dist/deb/control" > "$deb/control"
for p in "${PACKAGES[@]}"; do
    install -d "$deb/$p/DEBIAN"
    for s in preinst postinst prerm postrm triggers; do
        if [ -f "$src/dist/deb/$p.$s" ]; then
            case $s in triggers) mode=0644 ;; *) mode=0755 ;; esac
            install -m $mode "$src/dist/deb/$p.$s" "$deb/$p/DEBIAN/$s"
        fi
    done
    if [ -d "$deb/$p/etc" ]; then
        (cd "$deb/$p" && find etc -type f | sort | sed 's|^|/|') > "$deb/$p/DEBIAN/conffiles"
    fi
done
sed -i "s|@FILES@|$(echo $dis_files)|" "$deb/vsci-dis/DEBIAN/preinst"
# The soname has no version (Dolphin's programs need libsisci.so), which
# the shlibs format cannot describe; a symbols file can.
{
    echo "libsisci.so libsisci #MINVER#"
    echo "* Build-Depends-Package: libsisci-dev"
    nm -D --defined-only "$deb/libsisci/usr/lib/$ma/libsisci.so" | awk '{print $3}' | sort -u | sed "s/\$/@Base $DEB_VERSION/; s/^/ /"
} > "$deb/libsisci/DEBIAN/symbols"

# Normal modes; owners root (dpkg-deb --root-owner-group); file times
# clamped to SOURCE_DATE_EPOCH by dpkg-deb.
for p in "${PACKAGES[@]}"; do
    find "$deb/$p" -type d -exec chmod 0755 {} +
    find "$deb/$p" -type f -not -path '*/DEBIAN/*' -exec chmod go-w {} +
    (cd "$deb/$p" && find . -type f -not -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0r md5sum) > "$deb/$p/DEBIAN/md5sums"
done

# 7. Dependencies and control data; the packages.
cd "$work"
for p in "${PACKAGES[@]}"; do : > "debian/$p.substvars"; done
dpkg-shlibdeps -Tdebian/vsci.substvars debian/vsci/usr/bin/vscid debian/vsci/usr/bin/vsci
dpkg-shlibdeps -Tdebian/libsisci.substvars "debian/libsisci/usr/lib/$ma/libsisci.so"
for p in "${PACKAGES[@]}"; do
    dpkg-gencontrol -p"$p" -Tdebian/"$p".substvars -Pdebian/"$p"
    rm -f "$DEB_OUT/${p}_"*.deb
    dpkg-deb --root-owner-group -Zxz --build "debian/$p" "$DEB_OUT/" >/dev/null
done
ls -1 "$DEB_OUT"/*.deb
