"""The decoder demo (torch_spyre/tools/decoder_demo.py: a Granite-style decoder's prefill and
greedy decode on the card against the CPU, identical tokens, no CPU fallback) as a test, so that
run-all.sh runs it in the same Python process as the graph tests: one `import torch`, which
takes minutes under TCG on the debug kernel."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "torch_spyre", "tools"))

import decoder_demo  # noqa: E402


def test_decoder_demo_on_the_card_equals_the_cpu(monkeypatch, capsys):
    monkeypatch.setenv("TORCH_SPYRE_STRICT", "1")  # a fallback is an error (read at every call)
    monkeypatch.setattr(sys, "argv", ["decoder_demo.py"])
    rc = decoder_demo.main()
    out = capsys.readouterr().out
    print(out)
    assert rc == 0, out
    assert "identical tokens: True" in out and "cpu fallbacks: none" in out
