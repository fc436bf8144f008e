#!/usr/bin/env bash
# Builds xtcq_<version>_<arch>.deb from a staged `make install PREFIX=/usr`: xtcqd, xtcq,
# xtcq-bridge, libxtcq.so.0 / .a, xtcq.h, xtcq.pc, the systemd units, the sysusers entry,
# the man pages and the shell completions. dpkg-deb only: no debhelper needed.
#
#   packaging/build-deb.sh [OUTDIR]              # builds the binaries first (dist profile)
#   NO_BUILD=1 BIN=target/dist packaging/build-deb.sh [OUTDIR]
#
# Prints the path of the .deb. Installing it runs systemd-sysusers (user and group xtcq);
# the service is enabled by the administrator: `systemctl enable --now xtcqd`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/deb}
bin=${BIN:-target/dist}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
if [ -z "${NO_BUILD:-}" ]; then
    make build >&2
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
make --no-print-directory install NO_BUILD=1 BIN="$bin" PREFIX=/usr DESTDIR="$stage" >&2
# Debian policy: man pages compressed, docs under /usr/share/doc/<package>.
find "$stage/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} +
install -d "$stage/DEBIAN"
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: xtcq
Version: $version
Architecture: $arch
Maintainer: xtcq developers <xtcq@invalid>
Installed-Size: $size
Depends: libc6
Recommends: systemd
Section: net
Priority: optional
Description: job queue over shared memory (daemon, CLI, C library, NATS bridge)
 xtcqd keeps work-stealing job queues in a shared-memory segment; producers push and
 consumers steal without a system call. This package holds the daemon and its unit, the
 xtcq command line, the C library (libxtcq.so.0, libxtcq.a, xtcq.h, xtcq.pc) and the
 xtcq-bridge to NATS JetStream.
CONTROL
cat > "$stage/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    # The xtcq user and group (and xtcq-bridge) from the sysusers entry.
    if command -v systemd-sysusers >/dev/null; then
        systemd-sysusers /usr/lib/sysusers.d/xtcq.conf
    fi
    ldconfig
    if [ -d /run/systemd/system ]; then
        systemctl daemon-reload || true
    fi
fi
exit 0
SCRIPT
cat > "$stage/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
    systemctl stop xtcqd.service xtcq-bridge.service 2>/dev/null || true
fi
exit 0
SCRIPT
cat > "$stage/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
case "$1" in
    remove) ldconfig ;;
    purge)
        # The daemon's state (queue owners and permissions). The users and groups stay, as
        # Debian keeps system users: files they owned may remain elsewhere.
        # And the unit's segment (kept across restarts on purpose, RemoveIPC=no).
        rm -rf /var/lib/xtcq /etc/xtcq/bridge.env /dev/shm/xtcq
        rmdir /etc/xtcq 2>/dev/null || true
        ;;
esac
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
exit 0
SCRIPT
chmod 755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
mkdir -p "$out"
deb="$out/xtcq_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >&2
echo "$deb"
