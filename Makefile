# Installs xtcq system-wide: both binaries, the systemd unit (pointing at the installed
# xtcqd), the sysusers entry, the man pages and the shell completions.
#
#   make install                       # builds (release) and installs under /usr/local
#   make install PREFIX=/usr DESTDIR=pkg   # for a package: files under pkg/usr/...
#   make install NO_BUILD=1 BIN=target/debug   # installs binaries already built there
#
# Then, on the target system: `systemd-sysusers`, add the users of the queue to group xtcq,
# `systemctl daemon-reload && systemctl enable --now xtcqd`.

PREFIX ?= /usr/local
DESTDIR ?=
CARGO ?= cargo
BIN ?= target/release
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/xtcq
UNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
BASHDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHDIR ?= $(PREFIX)/share/zsh/site-functions
FISHDIR ?= $(PREFIX)/share/fish/vendor_completions.d
INSTALL ?= install

.PHONY: build install

build:
	$(CARGO) build --locked --release -p xtcqd -p xtcq-cli

install: $(if $(NO_BUILD),,build)
	$(INSTALL) -Dm755 $(BIN)/xtcqd $(DESTDIR)$(BINDIR)/xtcqd
	$(INSTALL) -Dm755 $(BIN)/xtcq $(DESTDIR)$(BINDIR)/xtcq
	$(INSTALL) -d $(DESTDIR)$(UNITDIR)
	sed -e 's|/usr/local/bin/xtcqd|$(BINDIR)/xtcqd|g' \
	    -e 's|/usr/local/share/doc/xtcq|$(DOCDIR)|g' \
	    systemd/xtcqd.service > $(DESTDIR)$(UNITDIR)/xtcqd.service
	chmod 644 $(DESTDIR)$(UNITDIR)/xtcqd.service
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
