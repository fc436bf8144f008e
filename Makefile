# Installs xtcq system-wide: the binaries (xtcqd, xtcq, xtcq-bridge), the systemd units
# (pointing at the installed binaries), the sysusers entry, the man pages, the shell
# completions, and the C library: libxtcq.so.0 (soname) with its links, libxtcq.a, xtcq.h
# and xtcq.pc for pkg-config (`cc prog.c $(pkg-config --cflags --libs xtcq)`).
#
#   make install                       # builds (dist profile) and installs under /usr/local
#   make install PREFIX=/usr DESTDIR=pkg   # for a package: files under pkg/usr/...
#   make install NO_BUILD=1 BIN=dir    # installs binaries and libxtcq.{so,a} already built there
#   make install PREFIX=$HOME/.local   # outside the linker's path: xtcq.pc adds an rpath
#
# Then, on the target system: `systemd-sysusers`, add the users of the queue to group xtcq,
# `systemctl daemon-reload && systemctl enable --now xtcqd`.

PREFIX ?= /usr/local
DESTDIR ?=
CARGO ?= cargo
BIN ?= target/dist
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/xtcq
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
BASHDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHDIR ?= $(PREFIX)/share/zsh/site-functions
FISHDIR ?= $(PREFIX)/share/fish/vendor_completions.d
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL ?= install
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
# The soname's number (capi/build.rs).
SOVERSION := 0
# Programs linked through xtcq.pc find the library without LD_LIBRARY_PATH: where the
# linker looks anyway (/usr, /usr/local) by itself, elsewhere through an rpath.
RPATH ?= $(if $(filter /usr /usr/local,$(PREFIX)),,-Wl$(comma)-rpath$(comma)$(LIBDIR) )
comma := ,

.PHONY: build install

build:
	$(CARGO) build --locked --profile dist -p xtcqd -p xtcq-cli -p xtcq-capi -p xtcq-bridge

install: $(if $(NO_BUILD),,build)
	$(INSTALL) -Dm755 $(BIN)/xtcqd $(DESTDIR)$(BINDIR)/xtcqd
	$(INSTALL) -Dm755 $(BIN)/xtcq $(DESTDIR)$(BINDIR)/xtcq
	$(INSTALL) -Dm755 $(BIN)/xtcq-bridge $(DESTDIR)$(BINDIR)/xtcq-bridge
	$(INSTALL) -Dm755 $(BIN)/libxtcq.so $(DESTDIR)$(LIBDIR)/libxtcq.so.$(VERSION)
	ln -sf libxtcq.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libxtcq.so.$(SOVERSION)
	ln -sf libxtcq.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libxtcq.so
	$(INSTALL) -Dm644 $(BIN)/libxtcq.a $(DESTDIR)$(LIBDIR)/libxtcq.a
	$(INSTALL) -Dm644 include/xtcq.h $(DESTDIR)$(INCLUDEDIR)/xtcq.h
	$(INSTALL) -d $(DESTDIR)$(PKGCONFIGDIR)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@RPATH@|$(RPATH)|' capi/xtcq.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/xtcq.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/xtcq.pc
	$(INSTALL) -d $(DESTDIR)$(UNITDIR)
	sed -e 's|/usr/local/bin/xtcqd|$(BINDIR)/xtcqd|g' \
	    -e 's|/usr/local/share/doc/xtcq|$(DOCDIR)|g' \
	    systemd/xtcqd.service > $(DESTDIR)$(UNITDIR)/xtcqd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/xtcqd.service
	sed -e 's|/usr/local/bin/xtcq-bridge|$(BINDIR)/xtcq-bridge|g' \
	    -e 's|/usr/local/share/doc/xtcq|$(DOCDIR)|g' \
	    systemd/xtcq-bridge.service > $(DESTDIR)$(UNITDIR)/xtcq-bridge.service
	chmod 644 $(DESTDIR)$(UNITDIR)/xtcq-bridge.service
	$(INSTALL) -Dm644 systemd/xtcq.sysusers.conf $(DESTDIR)$(SYSUSERSDIR)/xtcq.conf
	$(INSTALL) -Dm644 README.md $(DESTDIR)$(DOCDIR)/README.md
	$(INSTALL) -Dm644 CHANGELOG.md $(DESTDIR)$(DOCDIR)/CHANGELOG.md
	$(INSTALL) -d $(DESTDIR)$(DOCDIR)/guarantees
	$(INSTALL) -m644 docs/src/guarantees/*.md $(DESTDIR)$(DOCDIR)/guarantees/
	$(BIN)/xtcq man --dir $(DESTDIR)$(MANDIR)/man1
	$(INSTALL) -d $(DESTDIR)$(BASHDIR) $(DESTDIR)$(ZSHDIR) $(DESTDIR)$(FISHDIR)
	$(BIN)/xtcq completions bash > $(DESTDIR)$(BASHDIR)/xtcq
	$(BIN)/xtcq completions zsh > $(DESTDIR)$(ZSHDIR)/_xtcq
	$(BIN)/xtcq completions fish > $(DESTDIR)$(FISHDIR)/xtcq.fish
