#!/bin/sh
# tests/lint/ruff.sh — runs ruff (the Python linter) on this checkout: sh tests/lint/ruff.sh ARGS...
# runs `ruff ARGS...` from the checkout's root (make lint: `check --no-cache .`).
#
# Note [Where ruff comes from]
# Ruff is in neither Debian 12 nor Debian 13; Debian unstable packages it. Its .deb is fetched
# from unstable with the host's apt-get and private lists (this script's own sources list, lists
# and cache folders: the host's apt configuration is not touched, nothing is installed), unpacked
# with dpkg-deb -x, and its one binary cached outside the checkout, in
# $DKIT_TOOLS_CACHE/ruff-<version>/ (default /var/cache/dkit/tools), as the Debian roots are,
# because CI clones afresh on every run. The version is pinned (RUFF_DEB_VERSION): another ruff
# may find other things, and the check must not change under the tree. Unstable keeps only its
# newest version, so when it has moved on the newest is taken instead, with a message.
# Unstable builds ruff against glibc 2.39 or later: a host with such a glibc (Debian 13) runs it
# directly; on Debian 12 (glibc 2.36) it runs inside the Debian 13 root of make test-debian13
# (tests/debian13/run.sh, which makes the root if it is missing), from a copy in $BUILD/lint,
# inside the checkout that the root sees.
set -eu

RUFF_DEB_VERSION=${RUFF_DEB_VERSION:-0.16.10+ds-1}
TOOLS=${DKIT_TOOLS_CACHE:-/var/cache/dkit/tools}
CACHE=$TOOLS/ruff-$RUFF_DEB_VERSION
MIRROR=${DKIT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac

fetch() {
    if [ "$(id -u)" != 0 ]; then
        echo "tests/lint/ruff.sh: fetching ruff into $CACHE needs root (as make deps does)" >&2
        echo "run:  sudo make lint" >&2
        exit 1
    fi
    work=$BUILD/lint/apt
    rm -rf "$work"
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR sid main" >"$work/sid.list"
    # Unstable's Release file may be past its validity date in a frozen mirror (as in run.sh).
    set -- -q -o Dir::Etc::SourceList="$work/sid.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" \
        -o Acquire::Check-Valid-Until=false -o APT::Sandbox::User=root
    echo "== fetching ruff $RUFF_DEB_VERSION from Debian unstable into $CACHE (cached for later runs)"
    apt-get "$@" update >"$work/apt.log" 2>&1 || {
        cat "$work/apt.log" >&2
        echo "tests/lint/ruff.sh: apt-get update of Debian unstable's lists failed" >&2
        exit 1
    }
    if ! (cd "$work/deb" && apt-get "$@" download "ruff=$RUFF_DEB_VERSION") >>"$work/apt.log" 2>&1; then
        # Unstable keeps one version: once it has moved on, the pinned one cannot be fetched. The
        # rules are selected one by one ([tool.ruff] in pyproject.toml), so a newer ruff checks
        # what this one checks; take it, say so, and cache it under its own version.
        have=$(apt-cache "$@" policy ruff 2>/dev/null | sed -n 's/^ *Candidate: //p')
        echo "tests/lint/ruff.sh: Debian unstable no longer has ruff $RUFF_DEB_VERSION; using its $have" \
            "(set RUFF_DEB_VERSION in tests/lint/ruff.sh to it)" >&2
        (cd "$work/deb" && apt-get "$@" download ruff) >>"$work/apt.log" 2>&1 || {
            cat "$work/apt.log" >&2
            echo "tests/lint/ruff.sh: no ruff could be fetched from Debian unstable" >&2
            exit 1
        }
        CACHE=$TOOLS/ruff-$have
    fi
    dpkg-deb -x "$work"/deb/ruff_*.deb "$work/root"
    mkdir -p "$CACHE"
    cp "$work/root/usr/bin/ruff" "$CACHE/ruff.tmp"
    mv "$CACHE/ruff.tmp" "$CACHE/ruff"
    rm -rf "$work"
}

# the pinned version, or the newest one fetched when unstable had moved past it
[ -x "$CACHE/ruff" ] || CACHE=$(ls -d "$TOOLS"/ruff-*/ 2>/dev/null | sort -V | tail -1 | sed 's,/$,,')
[ -n "$CACHE" ] && [ -x "$CACHE/ruff" ] || { CACHE=$TOOLS/ruff-$RUFF_DEB_VERSION; fetch; }
if "$CACHE/ruff" --version >/dev/null 2>&1; then
    exec "$CACHE/ruff" "$@"
fi
# Debian 12: inside the Debian 13 root, which sees the checkout at its own path.
mkdir -p "$BUILD/lint"
cp "$CACHE/ruff" "$BUILD/lint/ruff"
exec sh tests/debian13/run.sh "$BUILD/lint/ruff" "$@"
