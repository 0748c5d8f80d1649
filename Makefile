# vsci top-level build.  `make` builds everything into build/ (a staged
# prefix: bin/, lib/, include/, lib/pkgconfig/, lib/cmake/SISCI/, examples/,
# tests/, bench/).  Shell scripts in scripts/ wrap this for the README's two
# commands.

BUILD    ?= $(CURDIR)/build
PREFIX   ?= /usr/local
CC       ?= cc
CFLAGS   ?= -O2 -g -Wall -Wextra -Werror=implicit-function-declaration
CARGO    ?= cargo
VERSION  := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)

# `make install` also installs the service (docs/operations.md): the systemd
# unit, a sysusers.d entry (group vsci, user vscid) and examples of its
# settings and of a cluster file in $(PREFIX)/share/vsci.
SYSTEMD_UNIT_DIR ?= $(PREFIX)/lib/systemd/system
SYSUSERS_DIR     ?= $(PREFIX)/lib/sysusers.d
# Where `make install` puts the library and the CMake package, below
# $(PREFIX) (the Debian packages use lib/<multiarch> and share/cmake/SISCI).
LIBDIR           ?= lib
CMAKEDIR         ?= lib/cmake/SISCI

# `make install-dis`: libsisci and the headers in Dolphin's layout (see
# scripts/install-dis.sh and README.md).
DIS_PREFIX ?= /opt/DIS
LDSO_CONF  ?= /etc/ld.so.conf.d/00-vsci-dis.conf

HEADERS     := include/sisci_api.h include/sisci_types.h include/sisci_error.h include/vsci_tmem.h
DIS_HEADERS := include/dis/dis_types.h

C_INC    := -I$(BUILD)/include
C_LIBS   := -L$(BUILD)/lib -Wl,-rpath,$(BUILD)/lib -lsisci -lpthread

EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
CTESTS   := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/*.c))
SIGCHAIN_VARIANTS := $(BUILD)/tests/t_sigchain_static $(BUILD)/tests/t_sigchain_dlopen
# A benchmark is one file, bench/NAME.c, or a directory of them,
# bench/NAME/*.c with NAME/main.c (sisci_bench, remote_bench); both build
# $(BUILD)/bench/NAME.
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c)) \
            $(patsubst bench/%/main.c,$(BUILD)/bench/%,$(wildcard bench/*/main.c))
TEST_PKGS := -p vsci-proto -p vscid -p vsci-client -p sisci -p vsci-cli -p vsci-fabric -p vsci-trap -p vsci-vm -p vsci-fuzz -p vsci-devshare -p vsci-nbd -p vsci-lend -p vsci-cprobe -p vsci-sys -p vsci-systest
C_COMMON := $(wildcard tests/c/common/*.h examples/common/*.h bench/common/*.h) $(HEADERS) $(DIS_HEADERS)

.PHONY: all rust stage c test lint test-python demo bench bench-report install install-dis uninstall-dis deb clean

all: c

# fabric_write_lat (crates/vsci-fabric/src/bin) is a benchmark peer: one
# delivered libfabric RMA write, run by `vsci bench --paths remote`; it is
# staged next to the C benchmarks in $(BUILD)/bench, as is tcp_pingpong
# (crates/vsci-cli/src/bin, built with vsci), the TCP ping-pong of
# `vsci bench --paths devices`.
rust:
	$(CARGO) build --release -p vscid -p vsci-cli -p sisci
	$(CARGO) build --release -p vsci-fabric --bin fabric_write_lat
	$(CARGO) build --release -p vsci-lend --bin vsci-memext-check

stage: rust
	@mkdir -p $(BUILD)/bin $(BUILD)/lib $(BUILD)/include/dis $(BUILD)/bench
	install -m 0755 target/release/vscid target/release/vsci $(BUILD)/bin/
	install -m 0755 target/release/vsci-memext-check $(BUILD)/bin/
	install -m 0755 target/release/fabric_write_lat $(BUILD)/bench/
	install -m 0755 target/release/tcp_pingpong $(BUILD)/bench/
	install -m 0755 target/release/libsisci.so $(BUILD)/lib/libsisci.so
	install -m 0644 target/release/libsisci.a $(BUILD)/lib/libsisci.a
	install -m 0644 $(HEADERS) $(BUILD)/include/
	install -m 0644 $(DIS_HEADERS) $(BUILD)/include/dis/
	scripts/sisci-dev-files.sh "" $(BUILD) lib lib/cmake/SISCI $(VERSION) > /dev/null
	@mkdir -p $(BUILD)/python/sisci
	install -m 0644 python/sisci/*.py python/sisci/py.typed $(BUILD)/python/sisci/

c: stage $(EXAMPLES) $(CTESTS) $(SIGCHAIN_VARIANTS) $(BENCHES)

$(BUILD)/examples/%: examples/%.c $(C_COMMON) | stage
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_INC) -o $@ $< $(C_LIBS)

$(BUILD)/tests/%: tests/c/%.c $(C_COMMON) | stage
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_INC) -Itests/c -o $@ $< $(C_LIBS)

# t_sigchain (issue 33) is built two more ways: linked with libsisci.a
# (and the libraries sisci.pc lists as private; relinked whenever stage
# installs a new libsisci.a), and without libsisci at all (it dlopen()s
# libsisci.so, found through the rpath, RTLD_LOCAL).
$(BUILD)/lib/libsisci.a: | stage ;

$(BUILD)/tests/t_sigchain_static: tests/c/t_sigchain.c $(C_COMMON) $(BUILD)/lib/libsisci.a | stage
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_INC) -Itests/c -DSIGCHAIN_STATIC -o $@ $< $(BUILD)/lib/libsisci.a \
	    $$(sed -n 's/^Libs.private: //p' $(BUILD)/lib/pkgconfig/sisci.pc)

$(BUILD)/tests/t_sigchain_dlopen: tests/c/t_sigchain.c $(C_COMMON) | stage
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_INC) -Itests/c -DSIGCHAIN_DLOPEN -o $@ $< -Wl,-rpath,$(BUILD)/lib -lpthread -ldl

# The compatibility program is built as strictly as Dolphin's own sample
# programs are by their users: any warning against our headers fails it.
$(BUILD)/tests/t_compat: CFLAGS += -Wall -Werror

$(BUILD)/bench/%: bench/%.c $(C_COMMON) | stage
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_INC) -Ibench -o $@ $< $(C_LIBS) -lm

.SECONDEXPANSION:
$(BUILD)/bench/%: bench/%/main.c $$(wildcard bench/%/*.c bench/%/*.h) $(C_COMMON) | stage
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(C_INC) -Ibench -o $@ $(filter %.c,$^) $(C_LIBS) -lm

test: all lint
	VSCI_BUILD=$(BUILD) $(CARGO) test --release --no-fail-fast $(TEST_PKGS) -- --test-threads=2

# The layout (rustfmt.toml; the fuzz crate is outside the workspace, so it is
# checked on its own) and the workspace lints (Cargo.toml [workspace.lints]: an
# unsafe block without its SAFETY comment is an error) over every crate and
# target, in the test command; clippy's other findings are reported, not fatal.
# `cargo fmt --all` (and the same for fuzz/) fixes what the first two report.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml --check
	$(CARGO) clippy --release --workspace --all-targets --quiet

# The Python binding's tests alone (python/tests; `make test` runs them too,
# through crates/vsci-systest/tests/python.rs).  `make` stages the package in
# $(BUILD)/python, where `vsci bench` finds it.
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)

test-python: all
	VSCI_BUILD=$(BUILD) PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m pytest -q -p no:cacheprovider python/tests

demo: all
	$(BUILD)/bin/vsci demo

bench: all
	$(BUILD)/bin/vsci bench

# Regenerates docs/benchmarks.md, docs/bench/results.{json,txt} and the
# plots (the remote path needs root for its network namespaces).
bench-report: all
	$(BUILD)/bin/vsci bench --paths local,remote,reflective,guest,guest-host,guest-guest,guest-remote --report docs

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/$(LIBDIR) $(DESTDIR)$(PREFIX)/include/dis
	install -m 0755 $(BUILD)/bin/vscid $(BUILD)/bin/vsci $(DESTDIR)$(PREFIX)/bin/
	install -m 0755 $(BUILD)/lib/libsisci.so $(DESTDIR)$(PREFIX)/$(LIBDIR)/
	install -m 0644 $(BUILD)/lib/libsisci.a $(DESTDIR)$(PREFIX)/$(LIBDIR)/
	install -m 0644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/
	install -m 0644 $(DIS_HEADERS) $(DESTDIR)$(PREFIX)/include/dis/
	scripts/sisci-dev-files.sh "$(DESTDIR)" $(PREFIX) $(LIBDIR) $(CMAKEDIR) $(VERSION)
	install -d $(DESTDIR)$(SYSTEMD_UNIT_DIR) $(DESTDIR)$(SYSUSERS_DIR) $(DESTDIR)$(PREFIX)/share/vsci $(DESTDIR)$(PREFIX)/share/doc/vsci
	sed 's|@PREFIX@|$(PREFIX)|g' dist/vscid.service.in > $(DESTDIR)$(SYSTEMD_UNIT_DIR)/vscid.service
	chmod 0644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/vscid.service
	install -m 0644 dist/vsci.sysusers $(DESTDIR)$(SYSUSERS_DIR)/vsci.conf
	install -m 0644 dist/cluster.toml.example dist/vscid.env dist/vsci-profile.sh $(DESTDIR)$(PREFIX)/share/vsci/
	install -m 0644 docs/operations.md docs/security.md docs/cluster.md docs/cli.md $(DESTDIR)$(PREFIX)/share/doc/vsci/
	$(if $(DESTDIR),,-ldconfig)

# Dolphin's layout (DIS_PREFIX=/opt/DIS): headers in include/ and include/dis/,
# libsisci.so and libsisci.a in lib64/, a loader entry (LDSO_CONF) and
# ldconfig (not with DESTDIR).  Installs what `make` built; does not build,
# so `sudo make install-dis` needs no Rust toolchain.  Refuses to replace
# files it did not install (Dolphin's own) unless FORCE=1.
install-dis uninstall-dis:
	BUILD='$(BUILD)' DESTDIR='$(DESTDIR)' DIS_PREFIX='$(DIS_PREFIX)' LDSO_CONF='$(LDSO_CONF)' \
	    FORCE='$(FORCE)' VERSION='$(VERSION)' scripts/install-dis.sh $(patsubst %-dis,%,$@)

# Debian packages (docs/packages.md): vsci (the node), libsisci, libsisci-dev
# and vsci-dis (Dolphin's /opt/DIS layout) in $(DEB_OUT), from a
# `make install DESTDIR=...` with PREFIX=/usr.  Like install-dis, the script
# builds nothing itself: `make -o all deb` packages what is built.
DEB_OUT ?= $(BUILD)/deb

deb: all
	BUILD='$(BUILD)' VERSION='$(VERSION)' DEB_OUT='$(DEB_OUT)' scripts/build-debs.sh

clean:
	rm -rf $(BUILD)
	$(CARGO) clean
