#!/bin/sh
# Runs inside the Debian unstable chroot (see scripts/sid-chroot.sh), with the
# checkout at /src:  in-chroot.sh tests|bench VERSION [ARGS...]
# Keeps one venv per Python version in the chroot (outside the checkout).
set -eu
what=$1; ver=$2; shift 2
venv=/opt/interpexec-venvs/$ver
py=/usr/bin/python$ver
[ -x "$py" ] || { echo "in-chroot: python$ver is not installed in the chroot" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check -e "/src[test]"
case "$what" in
    tests) exec "$venv/bin/python" -m pytest "$@" ;;
    bench) exec "$venv/bin/python" benchmarks/bench.py "$@" ;;
    compat)
        # A venv of its own: the packages of the compatibility table stay out of
        # the test venv.
        cvenv=/opt/interpexec-compat/$ver
        [ -x "$cvenv/bin/python" ] || "$py" -m venv "$cvenv"
        "$cvenv/bin/pip" install -q --disable-pip-version-check -e /src
        "$cvenv/bin/python" scripts/compat_table.py install
        exec "$cvenv/bin/python" scripts/compat_table.py probe "docs/compat/compat-$ver.json" ;;
    *) echo "in-chroot: unknown action $what" >&2; exit 2 ;;
esac
