# Spyre open stack: top-level entry points. Everything is built inside a cached Debian trixie
# sysroot (tools/setup/), which is also the guest OS of the QEMU VM (tools/vm/).
#
#   make demo      set up, build, boot a VM with $(CARDS) card(s), show the stack working
#   make check     set up, build, run every test suite (host, device, guest); summary line
#   make vm-shell  interactive shell in a VM with the cards
#   make bench     benchmarks (engine throughput vs host libtorch); figures, not pass/fail,
#                  drawn in build/bench/report.html
#   make intree-check   spyre.ko built inside Debian's 6.12 kernel tree (drivers/accel/spyre)
#   make dkms      the DKMS package built, installed and loaded in the VM
#   make install-headers  the uapi header as <drm/spyre_accel.h> ($(DESTDIR)$(PREFIX)/include)
SHELL := /bin/bash
CARDS ?= 1
export CARDS

IN_SYSROOT := tools/in-sysroot
CMAKE_DIR := build/cmake

.PHONY: all setup qemu driver driver-debug user build check check-debug-net check-multinode demo vm-shell bench \
	checkpatch format clean \
	intree-check dkms install-headers fuzz fuzz-asan

all: build

setup:
	@tools/setup/sysroot.sh >/dev/null
	@tools/setup/kernel-tools.sh >/dev/null
	@tools/vm/initramfs.sh >/dev/null

qemu: setup
	@tools/setup/qemu.sh >/dev/null

driver: setup
	@$(IN_SYSROOT) 'make -s -C driver'

# spyre.ko for the debug guest kernel (tools/setup/kernel-debug.sh), built out of tree from a
# mirror of driver/ in build/kdebug so that it does not disturb the stock build.
driver-debug: setup
	@kd=$$(tools/setup/kernel-debug.sh) && mkdir -p build/kdebug/driver && \
	find build/kdebug/driver -maxdepth 1 -type l -delete && \
	for f in $$(ls driver/*.[ch] | grep -v '\.mod\.c$$') driver/Makefile; do \
		ln -s ../../../$$f build/kdebug/driver/; done && \
	ln -sfn ../../uapi build/kdebug/uapi && ln -sfn ../../hw build/kdebug/hw && \
	$(IN_SYSROOT) "make -s -C build/kdebug/driver KDIR=$$kd"

# Compiles through ccache (tools/setup/ccache.sh) when it can be had: its cache outlives the
# checkout, so a clean clone recompiles only what changed.
user: setup
	@mkdir -p build
	@kt=$$(tools/setup/kernel-tools.sh) && cc=$$(tools/setup/ccache.sh || true) && \
	launcher=$${cc:+env;CCACHE_DIR=/cache/ccache;$$cc} && \
	$(IN_SYSROOT) "cmake -S . -B $(CMAKE_DIR) -G Ninja -Wno-dev \
		-DKSELFTEST_DIR=$$kt '-DCMAKE_C_COMPILER_LAUNCHER=$$launcher' \
		'-DCMAKE_CXX_COMPILER_LAUNCHER=$$launcher' > build/cmake-configure.log 2>&1 \
		|| { cat build/cmake-configure.log; exit 1; }; \
		if ninja -C $(CMAKE_DIR) > build/ninja.log 2>&1; then tail -n1 build/ninja.log; \
		else grep -E -A8 '^FAILED|error:' build/ninja.log | head -n 80; exit 1; fi"

build: qemu driver user

check: build driver-debug
	@tests/check.sh

# Checks the debug kernel itself: it must catch a planted leak, lock inversion and use-after-free.
check-debug-net: build driver-debug
	@tests/debug-net/run.sh

# Two VMs joined by an emulated network, the spyre backend across them (tests/multinode/run.sh).
check-multinode: build
	@tests/multinode/run.sh

demo: build
	@tools/vm/spyre-vm --cards $(CARDS) -- tools/demo-guest.sh

vm-shell: build
	@tools/vm/spyre-vm --shell --cards $(CARDS)

bench: user
	@tools/bench.sh

# The driver in a copy of linux-source-6.12 as drivers/accel/spyre, W=1 -Werror, and its uapi
# header through make headers (tools/intree-build.sh; the tree is cached).
intree-check: setup
	@tools/intree-build.sh

# DKMS on the VM's stock kernel: Debian's dkms builds the staged source into a package on the
# host (tools/dkms-stage.sh, in the sysroot: the guest's root); in the VM dkms ldtarball,
# install, modprobe, the uapi QUERY tests, dkms remove.
dkms: build
	@v=$$(tools/dkms-stage.sh) && tools/vm/spyre-vm --cards 1 -- tests/guest/dkms/dkms-install.sh $$v

# Installed next to the kernel's uapi DRM headers (its #include "drm.h" needs them there).
PREFIX ?= /usr
install-headers:
	install -D -m 0644 uapi/spyre_accel.h $(DESTDIR)$(PREFIX)/include/drm/spyre_accel.h

# The card model's random fuzz at length (make check runs its 8 fixed seeds): FUZZ_SEEDS seeds
# of FUZZ_OPS operations, each stopped after FUZZ_MS ms.
FUZZ_SEEDS ?= 64
FUZZ_OPS ?= 20000
FUZZ_MS ?= 30000
fuzz: qemu
	@qb=$$(dirname "$$(tools/setup/qemu.sh 2>/dev/null)") && $(IN_SYSROOT) "QEMU_BUILD=$$qb \
		SPYRE_FUZZ_SEEDS=$(FUZZ_SEEDS) SPYRE_FUZZ_OPS=$(FUZZ_OPS) SPYRE_FUZZ_MS=$(FUZZ_MS) \
		SPYRE_QTEST_FILTER=/spyre/fuzz-seeds SPYRE_QTEST_TIMEOUT=86400 \
		qemu-device/tests/run-qtest.sh"

# QEMU built with ASan and UBSan (its own cache key; a cold build takes far longer than the
# normal one, so this is not part of make check, which runs the qtests against a build with
# the card model alone sanitized): every qtest case, then the long fuzz.
SAN_ENV := ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
fuzz-asan: setup
	@qb=$$(dirname "$$(SPYRE_QEMU_SANITIZE=1 tools/setup/qemu.sh)") && $(IN_SYSROOT) "QEMU_BUILD=$$qb \
		$(SAN_ENV) qemu-device/tests/run-qtest.sh && QEMU_BUILD=$$qb $(SAN_ENV) \
		SPYRE_FUZZ_SEEDS=$(FUZZ_SEEDS) SPYRE_FUZZ_OPS=$(FUZZ_OPS) SPYRE_FUZZ_MS=$(FUZZ_MS) \
		SPYRE_QTEST_FILTER=/spyre/fuzz-seeds SPYRE_QTEST_TIMEOUT=86400 \
		qemu-device/tests/run-qtest.sh"

checkpatch: setup
	@kt=$$(tools/setup/kernel-tools.sh) && $(IN_SYSROOT) "perl $$kt/scripts/checkpatch.pl \
		--strict --no-tree --terse -f \$$(ls driver/*.[ch] | grep -v '\.mod\.c')"

format: setup
	@$(IN_SYSROOT) 'git ls-files "*.cpp" "*.hpp" "*.cc" | xargs -r clang-format -i'

clean:
	rm -rf build
	-@$(IN_SYSROOT) 'make -s -C driver clean' 2>/dev/null
