#!/usr/bin/env bash
# Provision (once) and use a Debian unstable chroot that carries CPython 3.13, 3.14
# and 3.15, the versions interpexec supports besides pyenv's 3.13.0 on the host.
#
#   scripts/sid-chroot.sh ensure            create the chroot unless it already exists
#   scripts/sid-chroot.sh run CMD [ARG...]  run CMD inside it, with this checkout
#                                           bind-mounted at /src (the working directory)
#
# The chroot lives outside the checkout (INTERPEXEC_CHROOT, default
# /var/tmp/interpexec-sid) and is reused when it is already complete.  `ensure`
# unmounts what it mounted on exit; `run` mounts inside a private mount
# namespace that ends with it.  Any failure exits non-zero with a
# message: a Python version that cannot be provisioned fails CI, it is never skipped.
set -euo pipefail

ROOT=${INTERPEXEC_CHROOT:-/var/tmp/interpexec-sid}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHONS=(python3.13 python3.14 python3.15)
STAMP="$ROOT/.interpexec-ready"

die() { echo "sid-chroot: $*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (debootstrap and mounts)"; }

host_ca_bundle() {
    for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
        [ -f "$f" ] && { echo "$f"; return; }
    done
    python3 -c 'import ssl; print(ssl.get_default_verify_paths().cafile or "")' 2>/dev/null || true
}

copy_ca() {
    local ca; ca=$(host_ca_bundle)
    [ -n "$ca" ] || die "no CA certificate bundle found on the host"
    mkdir -p "$ROOT/etc/ssl/certs"
    cp -f "$ca" "$ROOT/etc/ssl/certs/ca-certificates.crt"
}

MOUNTED=()
mount_one() {  # mount_one TARGET mount-args...
    local target=$1; shift
    mkdir -p "$target"
    if ! mountpoint -q "$target"; then
        mount "$@" "$target"
        MOUNTED=("$target" "${MOUNTED[@]}")
    fi
}
unmount_all() {
    local t
    for t in "${MOUNTED[@]}"; do umount -l "$t" 2>/dev/null || true; done
    MOUNTED=()
}
mount_system() {
    trap unmount_all EXIT
    mount_one "$ROOT/proc" -t proc proc
    mount_one "$ROOT/dev" --rbind /dev
    mount --make-rslave "$ROOT/dev" 2>/dev/null || true
    mount_one "$ROOT/dev/shm" --bind /dev/shm
}

is_ready() {
    [ -f "$STAMP" ] || return 1
    local py
    for py in "${PYTHONS[@]}"; do
        [ -x "$ROOT/usr/bin/$py" ] || return 1
        # CPython's own test package (tests/test_stdlib_suite.py runs its executor tests)
        [ -f "$ROOT/usr/lib/$py/test/test_concurrent_futures/executor.py" ] || return 1
    done
}

ensure() {
    need_root
    if is_ready; then copy_ca; return 0; fi
    if ! command -v debootstrap >/dev/null; then
        echo "sid-chroot: installing debootstrap" >&2
        apt-get update -qq || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
            || die "cannot install debootstrap"
    fi
    if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
        rm -rf "$ROOT"
        echo "sid-chroot: debootstrap sid into $ROOT (about a minute)" >&2
        debootstrap --variant=minbase sid "$ROOT" >"$ROOT.debootstrap.log" 2>&1 \
            || { tail -20 "$ROOT.debootstrap.log" >&2; die "debootstrap failed"; }
    fi
    copy_ca
    mount_system
    chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c "apt-get -o Acquire::Check-Valid-Until=false update -qq && \
            apt-get -o Acquire::Check-Valid-Until=false install -y -qq --no-install-recommends \
            ${PYTHONS[*]} python3.13-venv python3.14-venv python3.15-venv python3-pip ca-certificates \
            libpython3.13-testsuite libpython3.14-testsuite libpython3.15-testsuite >/dev/null" \
        || die "cannot install ${PYTHONS[*]} from Debian unstable"
    copy_ca   # ca-certificates may have rewritten the bundle
    for py in "${PYTHONS[@]}"; do
        chroot "$ROOT" "/usr/bin/$py" -c 'import _interpreters, _interpqueues' \
            || die "$py in the chroot lacks _interpreters/_interpqueues"
    done
    touch "$STAMP"
    unmount_all
    trap - EXIT
}

run() {
    need_root
    is_ready || die "chroot $ROOT is not provisioned; run '$0 ensure' first"
    command -v unshare >/dev/null || die "unshare (util-linux) is needed"
    # A private mount namespace per run: its mounts (this checkout at /src, /proc,
    # /dev) are seen by this run only and vanish with it, so concurrent runs from
    # different checkouts cannot see or unmount each other's.
    unshare --mount --propagation private -- bash "${BASH_SOURCE[0]}" _run_in_namespace "$@"
}

_run_in_namespace() {
    mount -t proc proc "$ROOT/proc"
    mount --rbind /dev "$ROOT/dev"
    mount --bind /dev/shm "$ROOT/dev/shm"
    mkdir -p "$ROOT/src"
    mount --bind "$SRC" "$ROOT/src"
    exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 CI="${CI:-}" PIP_DISABLE_PIP_VERSION_CHECK=1 \
        sh -c 'cd /src && exec "$@"' sh "$@"
}

case "${1:-}" in
    ensure) ensure ;;
    run) shift; [ $# -gt 0 ] || die "usage: $0 run CMD [ARG...]"; run "$@" ;;
    _run_in_namespace) shift; _run_in_namespace "$@" ;;
    *) die "usage: $0 ensure | run CMD [ARG...]" ;;
esac
