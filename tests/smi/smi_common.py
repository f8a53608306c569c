"""Helpers shared by the spyre-smi command-line tests (host: simulator, guest: spyre.ko)."""
import fcntl
import os
import re
import socket
import struct
import subprocess
import sys
import urllib.error
import urllib.request

# Where save_output() puts spyre-smi's output for tests/smi/validate_outputs.py (run on the
# host by tests/check.sh: the schema and exposition-format libraries are not in the sysroot).
OUTPUT_DIR = os.environ.get("SMI_OUTPUT_DIR", "build/test-results/smi-outputs/" +
                            os.environ.get("GUEST_RESULTS_PREFIX", "guest"))


class Checks:
    """PASS/FAIL lines and the final "N passed, M failed" line (run-all.sh "counted")."""

    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, ok, why=""):
        if ok:
            self.passed += 1
            print(f"PASS {name}")
        else:
            self.failed += 1
            print(f"FAIL {name}: {why}")
        sys.stdout.flush()
        return ok

    def done(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def run(smi, *args, env=None, user=None):
    """Runs spyre-smi; returns (exit status, stdout, stderr)."""
    cmd = [smi, *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    return p.returncode, p.stdout, p.stderr


def clear_outputs():
    """Empties OUTPUT_DIR: only this run's output gets validated."""
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    for f in os.listdir(OUTPUT_DIR):
        os.unlink(os.path.join(OUTPUT_DIR, f))


def save_output(name, text):
    """Saves a --json document (name.json) or an exporter scrape (name.prom) for validation."""
    with open(os.path.join(OUTPUT_DIR, name), "w") as f:
        f.write(text)


def start_exporter(smi, requests, env=None):
    """Starts `spyre-smi exporter --port 0`; returns (process, port)."""
    p = subprocess.Popen([smi, "exporter", "--port", "0", "--max-requests", str(requests)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = p.stderr.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
    if not m:
        p.kill()
        raise RuntimeError(f"exporter did not start: {line!r} {p.stderr.read()}")
    return p, int(m.group(1))


def http_get(port, path):
    """(status, content type, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


SERIES = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def sample(text, name, **labels):
    """Value of the series name{labels...} (a subset of its labels), or None. Reads values
    only; the format itself is validated by validate_outputs.py."""
    for line in text.splitlines():
        m = SERIES.match(line)
        if not m or m.group(1) != name:
            continue
        lab = dict(LABEL.findall(m.group(2) or ""))  # values as written (escapes kept)
        if all(lab.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return None


def loopback_up():
    """Brings up the loopback interface (the test VM boots with it down; its root file system
    has no ip(8)): SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, siocgifflags, struct.pack("16sh14x", b"lo", 0))
        flags = struct.unpack("16sh14x", ifr)[1]
        if not flags & iff_up:
            fcntl.ioctl(s, siocsifflags, struct.pack("16sh14x", b"lo", flags | iff_up))
