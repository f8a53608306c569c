#!/bin/bash
# Second stage of the guest, PID 1 in the trixie root: set up a minimal system, run the command
# the host put in $SPYRE_RUN_DIR/cmd (or an interactive shell), record its exit status in
# $SPYRE_RUN_DIR/rc, and power off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=${TERM:-linux}
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
hostname spyre-vm
busybox ip link set lo up 2>/dev/null

run=
netip=
for arg in $(cat /proc/cmdline); do
	case $arg in
	spyrevm.run=*) run=${arg#spyrevm.run=} ;;
	spyrevm.ip=*) netip=${arg#spyrevm.ip=} ;;
	esac
done
# spyre-vm --net: the emulated network to the other VM.
if [ -n "$netip" ]; then
	modprobe virtio_net
	busybox ip addr add "$netip" dev eth0
	busybox ip link set eth0 up
	last=${netip%/*}
	hostname "spyre-vm-${last##*.}"
fi
dir=/src/build/vm/$run
export SPYRE_VM_DIR=$dir	# for tools/vm/guest-qmp
stty -F /dev/console sane 2>/dev/null

# The checkout's driver, prepared by spyre-vm on the host (module index files and spyre.ko), goes
# into the tmpfs overlay so that modprobe works.
kver=$(uname -r)
if [ -d "$dir/modroot/lib/modules/$kver/updates" ]; then
	mkdir -p "/lib/modules/$kver/updates"
	cp "$dir/modroot/lib/modules/$kver/updates/"* "/lib/modules/$kver/updates/"
	cp "$dir/modroot/lib/modules/$kver/"modules.* "/lib/modules/$kver/"
fi

cd /src
if [ -n "$run" ] && [ -f "$dir/cmd" ]; then
	setsid bash -c "exec bash $dir/cmd </dev/console >/dev/console 2>&1"
	rc=$?
else
	echo "spyre-vm: interactive shell; 'poweroff' or Ctrl-D to leave"
	setsid -c bash -l </dev/console >/dev/console 2>&1
	rc=$?
fi
[ -n "$run" ] && echo "$rc" > "$dir/rc"
sync
# A synchronous power-off: PID 1 must not exit (that panics the kernel).
exec /bin/busybox poweroff -f
