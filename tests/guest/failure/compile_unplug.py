"""A PyTorch process runs eager, compiled and replayed work on a card across its hot-unplug
(tests/guest/failure/hotplug.sh drives QEMU; torch_compile.md "Errors").

    compile_unplug.py PCI_ADDRESS [SECONDS]

The same function runs eagerly, through torch.compile (Inductor with the Spyre backend) and
through backend="spyre_graphs" (a replay is one SUBMIT), each call checked against the CPU,
until the card goes away. Then each of the three raises a RuntimeError that says the card is
lost, with the same text once the per-job details are set aside (as eager mode's), and the
process exits cleanly. Prints progress lines; exits 0 on success, 1 with a reason otherwise.
"""

import re
import sys
import time

T0 = time.monotonic()

import torch  # noqa: E402

import torch_spyre  # noqa: E402,F401  (registers the device)
from torch_spyre._inductor import replay  # noqa: E402


def fail(why):
    print(f"compile_unplug: FAIL: {why}", flush=True)
    sys.exit(1)


def matmul_epilogue(a, b):
    return torch.relu(a @ b + 1.0) * 0.5


def card_at(pci):
    for i in range(torch.spyre.device_count()):
        if torch.spyre.get_device_properties(i)["pci_address"] == pci:
            return i
    fail(f"no card at {pci}")


def gist(msg):
    """The error without what only this call has: who launched it, job ids and numbers."""
    msg = re.sub(r"; launched by .*", "", msg)
    msg = re.sub(r"\bjob \d+ \([^)]*\)", "job", msg)
    return re.sub(r"\d+", "N", msg.split(": ", 1)[-1])


def main():
    if len(sys.argv) < 2:
        fail("usage: compile_unplug.py PCI_ADDRESS [SECONDS]")
    deadline = time.monotonic() + (int(sys.argv[2]) if len(sys.argv) > 2 else 300)
    dev = f"spyre:{card_at(sys.argv[1])}"
    a, b = torch.randn(8, 64), torch.randn(64, 48)
    want = matmul_epilogue(a, b)
    da, db = a.to(dev), b.to(dev)
    calls = {
        "eager": matmul_epilogue,
        "compiled": torch.compile(matmul_epilogue),
        "replayed": torch.compile(matmul_epilogue, backend="spyre_graphs"),
    }

    def run(name):
        out = calls[name](da, db)
        torch.spyre.synchronize(dev)
        return out.cpu()

    rounds, lost = 0, None
    while lost is None:
        for name in calls:
            try:
                got = run(name)
            except RuntimeError as e:
                lost = (name, str(e))
                break
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
                fail(f"{name}: wrong result in round {rounds}")
        else:
            rounds += 1
            if rounds == 3:  # warm-up, capture, replay: hotplug.sh unplugs after this line
                if replay.STATS["captures"] != 1 or replay.STATS["capture_failures"]:
                    fail(f"the replayed form was not captured: {replay.STATS}")
                print(f"compile_unplug: first op verified ({time.monotonic() - T0:.0f} s after "
                      f"start)", flush=True)
        if time.monotonic() > deadline:
            fail("the card never went away")
    if rounds < 3:
        fail(f"the card went away before the calls were verified: {lost}")
    print(f"compile_unplug: {rounds} rounds verified, then {lost[0]}: {lost[1]}", flush=True)

    seen = {}
    for name in calls:
        try:
            run(name)
        except RuntimeError as e:
            seen[name] = str(e)
            print(f"compile_unplug: {name} after the loss: {e}", flush=True)
            continue
        fail(f"{name} ran on a card that is gone")
    for name, msg in seen.items():
        if "lost" not in msg and "removed" not in msg:
            fail(f"{name}: the error does not say the card is lost: {msg}")
    if len({gist(m) for m in seen.values()}) != 1:
        fail(f"compiled or replayed calls report the loss unlike eager mode: {seen}")
    print("compile_unplug: ok: every form reports the lost card alike", flush=True)


if __name__ == "__main__":
    main()
