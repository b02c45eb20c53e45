#!/bin/sh
# tests/debian13/run.sh — runs a command inside a Debian 13 (trixie) root: Python 3.13, torch 2.6,
# torchvision 0.21, numpy 2.x, setuptools 78 and GCC 14, the current stack dkit's users have.
#
#   sh tests/debian13/run.sh make ...        run a command there, in this checkout
#   sh tests/debian13/run.sh --root          make (or reuse) the root, print its path
#
# Note [The Debian 13 root]
# `make test` runs the C tests and the Python suite twice: on the host (Debian 12: torch 1.13,
# Python 3.11) and here (make test-debian13). The root is made from Debian's registry alone:
# debootstrap --variant=minbase, then apt-get inside it (about 25 s and 70 s here), no other
# network. It is cached outside the checkout, in $DKIT_DEBIAN13_ROOT (default
# /var/cache/dkit/debian13), because CI clones afresh on every run; a stamp file records the
# package list it was made with, so a changed list (below) remakes it, and a root left half-made
# by an interrupted run has no stamp and is made again. A lock serialises runs that share it.
#
# The command runs in a private mount namespace (unshare -m): /proc, /dev and the checkout (at
# its own absolute path, so the Makefile's absolute paths hold) are mounted there and vanish with
# the namespace, so nothing is left mounted on the host, whatever way the command ends. It needs
# root, as `make deps` does; as another user it prints what to run and fails.
set -eu

# DKIT_DEBIAN_SUITE=sid makes and enters a Debian unstable root instead (make test-debian-sid:
# torch 2.14, torchvision 0.27, NumPy 2.4, pytest 9, Python 3.14, GCC 16 in the registry this was
# written against). Unstable's Release file may be past its validity date in a frozen mirror, so
# apt is told not to check it there.
SUITE=${DKIT_DEBIAN_SUITE:-trixie}
case $SUITE in
trixie) ROOT=${DKIT_DEBIAN13_ROOT:-/var/cache/dkit/debian13} APT_OPTS="" EXTRA="" ;;
sid) ROOT=${DKIT_DEBIAN_SID_ROOT:-/var/cache/dkit/debian-sid} APT_OPTS="-o Acquire::Check-Valid-Until=false"
    EXTRA="libfmt-dev" ;; # torch 2.14's headers include <fmt/format.h>; its libtorch-dev does not depend on it
*) echo "tests/debian13/run.sh: DKIT_DEBIAN_SUITE is trixie or sid, not $SUITE" >&2; exit 2 ;;
esac
MIRROR=${DKIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# What the Debian 13 suite needs: a compiler, cmocka, Python with torch (and its C++ headers, for
# the torch reader) and pip, to install dkit into a venv as users do.
PACKAGES="gcc g++ make libc6-dev libcmocka-dev python3-dev python3-setuptools python3-numpy python3-pytest
python3-torch python3-torchvision libtorch-dev pybind11-dev python3-venv python3-pip ca-certificates $EXTRA"
STAMP_TEXT="$SUITE minbase: $(echo $PACKAGES)"

if [ "$(id -u)" != 0 ]; then
    echo "tests/debian13/run.sh: making and entering the Debian 13 root needs root (debootstrap, chroot)." >&2
    echo "run:  sudo make test-debian13" >&2
    exit 1
fi

make_root() {
    stamp="$ROOT/.dkit-stamp"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$STAMP_TEXT" ]; then
        return 0
    fi
    if ! command -v debootstrap >/dev/null 2>&1; then
        echo "tests/debian13/run.sh: debootstrap is missing (make deps installs it)" >&2
        exit 1
    fi
    echo "== making the Debian $SUITE root in $ROOT (cached for later runs)"
    rm -rf "$ROOT"
    mkdir -p "$ROOT"
    start=$(date +%s)
    debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
        tail -20 "$ROOT.log" >&2
        echo "tests/debian13/run.sh: debootstrap failed (the whole log: $ROOT.log)" >&2
        exit 1
    }
    in_root sh -c "apt-get $APT_OPTS update -q && DEBIAN_FRONTEND=noninteractive apt-get $APT_OPTS install -y -q --no-install-recommends $(echo $PACKAGES) && apt-get clean" \
        >>"$ROOT.log" 2>&1 || {
        tail -20 "$ROOT.log" >&2
        echo "tests/debian13/run.sh: apt-get inside the root failed (the whole log: $ROOT.log)" >&2
        exit 1
    }
    printf '%s' "$STAMP_TEXT" >"$stamp"
    echo "== Debian $SUITE root ready in $(($(date +%s) - start)) s"
}

# in_root CMD...: CMD inside the root, in a private mount namespace, from the current directory.
in_root() {
    here=$(pwd -P)
    unshare -m --propagation private sh -eu -c '
        root=$1 here=$2; shift 2
        mount -t proc proc "$root/proc"
        mount --rbind /dev "$root/dev"
        mkdir -p "$root$here"
        mount --bind "$here" "$root$here"
        cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
        exec chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
            LANG=C.UTF-8 CI="${CI:-}" DKIT_TORCH_READER="${DKIT_TORCH_READER:-}" \
            sh -c "cd \"\$0\" && exec \"\$@\"" "$here" "$@"
    ' sh "$ROOT" "$here" "$@"
}

mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock 9
make_root
if [ "${1:-}" = "--root" ]; then
    echo "$ROOT"
    exit 0
fi
[ $# -gt 0 ] || { echo "usage: tests/debian13/run.sh COMMAND... | --root" >&2; exit 2; }
in_root "$@"
