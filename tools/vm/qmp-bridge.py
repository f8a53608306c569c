#!/usr/bin/env python3
"""Lets the guest drive QEMU's monitor (QMP), e.g. to hot-unplug a card from inside a test.

Runs next to QEMU (started by spyre-vm). The guest writes a QMP command as JSON into
DIR/qmp/req-<name>.json (through the read-write 9p share of the checkout); the bridge sends it
on QEMU's QMP socket DIR/qmp.sock and writes QEMU's answer to DIR/qmp/rep-<name>.json, with
the events that arrived meanwhile in DIR/qmp/events.jsonl. tools/vm/guest-qmp is the guest's
side. The bridge ends when QEMU closes the socket.
"""
import json
import os
import select
import socket
import sys
import time

POLL_S = 0.05


def connect(path, deadline):
    while True:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


class Qmp:
    def __init__(self, sock, events_path):
        self.sock = sock
        self.buf = b""
        self.events_path = events_path
        greeting = self._read()
        if "QMP" not in greeting:
            raise RuntimeError(f"unexpected QMP greeting {greeting}")
        self.command({"execute": "qmp_capabilities"})

    def _read(self, timeout=None):
        """The next message, or None if none arrived within timeout (None = wait)."""
        while b"\n" not in self.buf:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return None
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("QEMU closed the QMP socket")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def command(self, cmd):
        self.sock.sendall(json.dumps(cmd).encode() + b"\n")
        while True:
            msg = self._read()
            if "event" in msg:
                self._log_event(msg)
                continue
            return msg

    def drain_events(self, timeout):
        msg = self._read(timeout)
        while msg is not None:
            if "event" in msg:
                self._log_event(msg)
            msg = self._read(0)

    def _log_event(self, msg):
        with open(self.events_path, "a") as f:
            f.write(json.dumps(msg) + "\n")


def main():
    run_dir = sys.argv[1]
    qdir = os.path.join(run_dir, "qmp")
    os.makedirs(qdir, exist_ok=True)
    qmp = Qmp(connect(os.path.join(run_dir, "qmp.sock"), time.monotonic() + 60),
              os.path.join(qdir, "events.jsonl"))
    while True:
        qmp.drain_events(POLL_S)
        for name in sorted(os.listdir(qdir)):
            if not (name.startswith("req-") and name.endswith(".json")):
                continue
            req = os.path.join(qdir, name)
            try:
                with open(req) as f:
                    cmd = json.load(f)
                reply = qmp.command(cmd)
            except (OSError, ValueError) as e:
                reply = {"error": {"class": "BridgeError", "desc": str(e)}}
            os.unlink(req)
            rep = os.path.join(qdir, "rep-" + name[len("req-"):])
            with open(rep + ".tmp", "w") as f:
                json.dump(reply, f)
            os.rename(rep + ".tmp", rep)


if __name__ == "__main__":
    try:
        main()
    except (EOFError, ConnectionError, BrokenPipeError):
        pass
