#!/usr/bin/env bash
# Installs a built xtcq .deb into this machine (as root), starts xtcqd as its unit would
# (user xtcq, socket /run/xtcq/xtcqd.sock, made as systemd's RuntimeDirectory= would make
# it: the container CI runs in has no systemd), pushes and steals as another user in group
# xtcq, then purges the package and checks that only what Debian keeps is left (the system
# users; nothing of the package's files, nor /var/lib/xtcq).
#
#   packaging/deb-check.sh target/deb/xtcq_0.1.0_amd64.deb
set -euo pipefail
deb=${1:?usage: deb-check.sh XTCQ.deb}
[ "$(id -u)" = 0 ] || { echo "deb-check: run as root (it installs a package and adds a user)" >&2; exit 2; }
if dpkg -s xtcq >/dev/null 2>&1; then
    echo "deb-check: xtcq is installed already; remove it first (dpkg --purge xtcq)" >&2
    exit 2
fi
fail() { echo "deb-check: FAILED: $*" >&2; exit 1; }
daemon=
cleanup() {
    [ -n "$daemon" ] && kill "$daemon" 2>/dev/null || true
    userdel xtcqcheck 2>/dev/null || true
}
trap cleanup EXIT

dpkg -i "$deb"
files=$(dpkg -L xtcq)
for f in /usr/bin/xtcqd /usr/bin/xtcq /usr/bin/xtcq-bridge /usr/lib/libxtcq.so.0 /usr/lib/libxtcq.a \
    /usr/include/xtcq.h /usr/lib/pkgconfig/xtcq.pc /usr/lib/systemd/system/xtcqd.service \
    /usr/lib/systemd/system/xtcq-bridge.service /usr/lib/sysusers.d/xtcq.conf \
    /usr/share/man/man1/xtcq.1.gz /usr/share/bash-completion/completions/xtcq; do
    [ -e "$f" ] || fail "$f not installed"
done
getent passwd xtcq >/dev/null || fail "the postinst made no user xtcq"
id -nG xtcq-bridge | grep -qw xtcq || fail "xtcq-bridge is not in group xtcq"
# The installed units verify on the host, with the command as documented (no flag hiding
# errors of the units they pull in).
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify xtcqd.service xtcq-bridge.service || fail "systemd-analyze verify of the installed units"
fi
# The C library through pkg-config, as a C user would.
pkg-config --cflags --libs xtcq | grep -q -- -lxtcq || fail "pkg-config does not find xtcq"

# What the unit does: RuntimeDirectory=xtcq (0750), StateDirectory=xtcq (0700), then
# ExecStart= as User=xtcq Group=xtcq with UMask=0007.
unit=/usr/lib/systemd/system/xtcqd.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
install -d -o xtcq -g xtcq -m 0750 /run/xtcq
install -d -o xtcq -g xtcq -m 0700 /var/lib/xtcq
rm -f /dev/shm/xtcq
# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it
setpriv --reuid xtcq --regid xtcq --init-groups sh -c "umask 0007; exec $exec_start" &
daemon=$!
for _ in $(seq 100); do [ -S /run/xtcq/xtcqd.sock ] && break; sleep 0.1; done
[ -S /run/xtcq/xtcqd.sock ] || fail "xtcqd made no socket at /run/xtcq/xtcqd.sock"

# Another user, in group xtcq, with nothing pointing at the socket: the default path.
useradd --system --no-create-home --groups xtcq xtcqcheck
as_user() { setpriv --reuid xtcqcheck --regid xtcqcheck --init-groups env -u XTCQ_SOCKET HOME=/nonexistent "$@"; }
as_user xtcq create jobs --deques 1 --capacity 64 --exist-ok
as_user xtcq push jobs "from the package"
got=$(as_user xtcq steal jobs --timeout 5s)
[ "$got" = "from the package" ] || fail "stole '$got'"
echo "deb-check: user xtcqcheck pushed and stole through /run/xtcq/xtcqd.sock"

kill "$daemon"; wait "$daemon" || true; daemon=
# systemd removes the runtime directory when the service stops (RuntimeDirectoryPreserve=restart).
rm -rf /run/xtcq
[ -e /dev/shm/xtcq ] || fail "xtcqd left no segment at /dev/shm/xtcq (the unit's --segment)"
dpkg --purge xtcq
left=
for f in $files; do
    [ -d "$f" ] && continue     # shared directories (/usr/bin...) stay
    if [ -e "$f" ] || [ -L "$f" ]; then left="$left $f"; fi
done
[ -z "$left" ] || fail "left after purge:$left"
[ ! -e /var/lib/xtcq ] || fail "/var/lib/xtcq left after purge"
[ ! -e /dev/shm/xtcq ] || fail "the segment /dev/shm/xtcq left after purge"
echo "deb-check: purged; left as Debian keeps them: users $(getent passwd xtcq xtcq-bridge | cut -d: -f1 | tr '\n' ' ')"
