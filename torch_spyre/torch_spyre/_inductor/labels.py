"""Launch labels of compiled graphs (Documentation/torch_compile.md "Errors").

A label names what a launch came from: the kernel (a generated ``SpyreKernel`` or an extern
kernel the wrapper calls), the compiled graph by Dynamo's compile id, the FX nodes with their
aten ops and the user's source lines from the nodes' stack traces. libspyre reports it when the
launch fails on the card ("launched by <label>").
"""

import os
import re

import torch._guards

import torch_spyre


def _source_line(stack_trace):
    """The user's line of an FX node's stack trace: "file.py:12: the code"."""
    lines = (stack_trace or "").strip().splitlines()
    for k in range(len(lines) - 1, -1, -1):
        m = re.match(r'\s*File "(.*)", line (\d+)', lines[k])
        if m:
            code = lines[k + 1].strip() if k + 1 < len(lines) else ""
            return f"{os.path.basename(m.group(1))}:{m.group(2)}: {code}".rstrip(": ")
    return None


def origin_label(name, fx_nodes):
    """``name`` of the graph being compiled, with the FX nodes it came from (call_function
    nodes among ``fx_nodes``, Inductor's origins) and their source lines."""
    origins = {o.name: o for o in fx_nodes if o.op == "call_function"}
    cid = torch._guards.CompileContext.current_compile_id()
    text = f"{name} of compiled graph [{cid}]" if cid is not None else name
    if not origins:
        return text
    order = sorted(origins)
    ops = ", ".join(f"{k} ({origins[k].target})" for k in order)
    where = list(dict.fromkeys(filter(None, (_source_line(origins[k].meta.get("stack_trace"))
                                             for k in order))))
    text += f", graph nodes {ops}"
    if where:
        text += "; from " + " | ".join(where[:3])
    return text


class LaunchLabel:
    """``with label:`` names the launches queued inside (a pushed libspyre launch label) and
    notes an exception raised there with the label. Stateless, so the generated wrapper keeps
    one per extern kernel call at module level."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __enter__(self):
        torch_spyre._C._push_launch_label(self.text)

    def __exit__(self, kind, value, tb):
        torch_spyre._C._pop_launch_label()
        if value is not None:
            value.add_note(f"torch_spyre: raised by {self.text}")
        return False
