"""Devices: count, lazy init, current device, device guard, properties, printing."""

import pytest
import torch

import torch_spyre
from conftest import assert_same, make, run_python


def test_lazy_init_in_fresh_process():
    r = run_python(
        "import torch, torch_spyre\n"
        "assert torch.spyre.device_count() == 2\n"
        "assert not torch.spyre.is_initialized()\n"
        "assert not torch_spyre._C._is_device_open(0)\n"
        "x = torch.ones(3).to('spyre:1')\n"
        "assert torch.spyre.is_initialized()\n"
        "assert torch_spyre._C._is_device_open(1) and not torch_spyre._C._is_device_open(0)\n"
        "y = x.to('spyre:0')\n"
        "assert torch_spyre._C._is_device_open(0)\n"
        "print('ok')\n"
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_no_device_gives_libspyre_reason():
    r = run_python(
        "import torch, torch_spyre\n"
        "assert torch.spyre.device_count() == 0 and not torch.spyre.is_available()\n"
        "try:\n"
        "    torch.ones(3).to('spyre')\n"
        "except RuntimeError as e:\n"
        "    print(e)\n",
        SPYRE_SIM_DEVICES="0",
    )
    assert r.returncode == 0, r.stderr
    assert "no Spyre device" in r.stdout and "SPYRE_SIM_DEVICES=0" in r.stdout, r.stdout


def test_backend_registration():
    assert torch._C._get_privateuse1_backend_name() == "spyre"
    assert torch.spyre.is_available()
    assert torch.spyre.device_count() == 2
    assert torch.device("spyre").type == "spyre"
    x = torch.zeros(2, device="spyre")
    assert x.is_spyre and x.device == torch.device("spyre:0")
    assert torch.ones(2).spyre(1).device == torch.device("spyre:1")
    m = torch.nn.Linear(2, 2).spyre()
    assert m.weight.device.type == "spyre"


def test_current_device_and_set_device():
    assert torch.spyre.current_device() == 0
    try:
        torch.spyre.set_device(1)
        assert torch.spyre.current_device() == 1
        assert torch.empty(4, device="spyre").device == torch.device("spyre:1")
        torch.spyre.set_device("spyre:0")
        assert torch.spyre.current_device() == 0
    finally:
        torch.spyre.set_device(0)


def test_invalid_device_index():
    with pytest.raises(IndexError, match="invalid spyre device index 5"):
        torch.spyre.set_device(5)
    with pytest.raises(IndexError, match="invalid spyre device index 2: 2 devices"):
        torch.empty(1, device="spyre:2")
    assert torch.spyre.current_device() == 0


def test_device_context_manager_is_a_guard():
    with torch.spyre.device(1):
        assert torch.spyre.current_device() == 1
        y = torch.arange(6.0).to("spyre")
        assert y.device.index == 1
        with torch.spyre.device(0):
            assert torch.spyre.current_device() == 0
        assert torch.spyre.current_device() == 1
    assert torch.spyre.current_device() == 0
    # c10::DeviceGuard on the C++ side: an op on a tensor of card 1 runs there and leaves the
    # current device alone.
    z = y * 2
    assert z.device.index == 1 and torch.spyre.current_device() == 0
    assert_same(z.cpu(), torch.arange(6.0) * 2)
    with torch.spyre.device_of(z):
        assert torch.spyre.current_device() == 1


def test_current_device_is_per_thread():
    import threading

    seen = []
    torch.spyre.set_device(1)
    try:
        t = threading.Thread(target=lambda: seen.append(torch.spyre.current_device()))
        t.start()
        t.join()
    finally:
        torch.spyre.set_device(0)
    assert seen == [0]


def test_device_properties():
    p = torch.spyre.get_device_properties(1)
    assert p["name"] == "spyre-sim1" and p["backend"] == "sim"
    assert p["num_cores"] == 32 and p["total_memory"] > 0
    assert torch.spyre.get_device_name() == "spyre-sim0"


def test_accelerator_api():
    assert torch.accelerator.current_accelerator() == torch.device("spyre")
    assert torch.accelerator.device_count() == 2


def test_print_spyre_tensor(fallback_reset):
    x = torch.tensor([[1.5, -2.0], [3.25, 4.0]]).to("spyre")
    s = repr(x)
    assert s == "tensor([[ 1.5000, -2.0000],\n        [ 3.2500,  4.0000]], device='spyre:0')", s
    assert repr(torch.arange(3, dtype=torch.int32).to("spyre:1")) == (
        "tensor([0, 1, 2], device='spyre:1', dtype=torch.int32)")
    assert "device='spyre:1'" in repr(torch.arange(3).to("spyre:1"))
    assert repr(torch.empty(0, 2, device="spyre")).startswith("tensor([], device='spyre:0'")
    p = torch.nn.Parameter(torch.ones(2).to("spyre"))
    assert repr(p) == "Parameter containing:\ntensor([1., 1.], device='spyre:0', requires_grad=True)"
    # Formatting ran on one host copy, not through the CPU fallback.
    assert torch_spyre.fallback_counts() == {}
    assert_same(make((3,), torch.float32).to("spyre").cpu(), make((3,), torch.float32))
