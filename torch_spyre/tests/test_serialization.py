"""torch.save / torch.load of spyre tensors and module state dicts: to the CPU, back to spyre,
views keeping their shared storage, and CPU checkpoints loaded onto spyre."""

import io

import pytest
import torch

from conftest import assert_same, make


def roundtrip(obj, **load_kw):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.bool])
def test_tensor_roundtrip_keeps_the_device(dtype):
    x = make((5, 7), dtype)
    y = roundtrip(x.to("spyre:1"))
    assert y.device == torch.device("spyre:1")
    assert_same(y.cpu(), x)


def test_map_location_cpu_and_spyre():
    x = make((3, 130), torch.float32)
    d = x.to("spyre")
    on_cpu = roundtrip(d, map_location="cpu")
    assert on_cpu.device.type == "cpu"
    assert_same(on_cpu, x)
    moved = roundtrip(d, map_location="spyre:1")
    assert moved.device == torch.device("spyre:1")
    assert_same(moved.cpu(), x)
    assert_same(roundtrip(d, map_location={"spyre:0": "cpu"}), x)


def test_views_share_storage_after_load():
    base = make((4, 6), torch.float32).to("spyre")
    obj = roundtrip({"base": base, "row": base[1], "t": base.t()})
    assert obj["row"].untyped_storage().data_ptr() == obj["base"].untyped_storage().data_ptr()
    obj["base"][1].fill_(7.0)
    assert_same(obj["row"].cpu(), torch.full((6,), 7.0))
    assert_same(obj["t"].cpu(), obj["base"].cpu().t())


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 8))


def test_state_dict_spyre_to_cpu_and_back():
    m = model(0).to("spyre")
    sd = roundtrip(m.state_dict(), map_location="cpu")
    assert all(v.device.type == "cpu" for v in sd.values())
    cpu_m = model(1)
    cpu_m.load_state_dict(sd)
    x = make((3, 16), torch.float32)
    torch.testing.assert_close(m(x.to("spyre")).cpu(), cpu_m(x), rtol=1e-4, atol=1e-4)
    sd2 = roundtrip(m.state_dict(), map_location="spyre")
    assert all(v.device.type == "spyre" for v in sd2.values())
    for k, v in m.state_dict().items():
        assert_same(sd2[k].cpu(), v.cpu())


def test_cpu_checkpoint_onto_spyre():
    cpu_m = model(2)
    sd = roundtrip(cpu_m.state_dict(), map_location="spyre")  # the default: weights_only
    assert {v.device for v in sd.values()} == {torch.device("spyre:0")}
    m = model(3).to("spyre")
    m.load_state_dict(sd)
    x = make((4, 16), torch.float32)
    torch.testing.assert_close(m(x.to("spyre")).cpu(), cpu_m(x), rtol=1e-4, atol=1e-4)
    # and into a CPU module built with spyre parameters, by assign
    m2 = model(4).to("spyre")
    m2.load_state_dict(roundtrip(cpu_m.state_dict()), assign=False)
    assert next(m2.parameters()).device.type == "spyre"
