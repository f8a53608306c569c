"""Inductor's FX graph cache keys a compiled graph by the graph, torch and Inductor's config,
not by the backend that generated the code: a cached wrapper from an older torch_spyre (an
older kernel description, eager form or fusion rule) would be reused. A no-op post-grad pass
whose uuid is a hash of torch_spyre's Inductor backend sources puts them into the key."""

import hashlib
import os

from torch._inductor.custom_graph_pass import CustomGraphPass

_HERE = os.path.dirname(os.path.abspath(__file__))


class BackendKey(CustomGraphPass):
    def __init__(self, root=_HERE):
        self.root = root  # the torch_spyre package directory

    def __call__(self, graph):
        pass

    def uuid(self):
        # names relative to the package and contents: the same sources installed elsewhere
        # give the same key
        names = sorted(os.path.join("_inductor", f)
                       for f in os.listdir(os.path.join(self.root, "_inductor"))
                       if f.endswith(".py")) + ["_dynamo.py"]
        h = hashlib.sha256()
        for name in names:
            with open(os.path.join(self.root, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
        return h.hexdigest()


def source_lines(gm):
    """The stack traces of a spyre graph's nodes (None for other graphs). The labels of its
    compiled kernels name the user's source lines (_inductor/labels.py), but Inductor's key
    holds the graph's code, not where it came from: the same function moved to other lines, or
    written in another file, got the first compile's labels from the cache."""
    def on_spyre(n):  # Dynamo's graphs (AOTAutograd's key) hold example values, AOT's values
        v = n.meta.get("val", n.meta.get("example_value"))
        vals = v if isinstance(v, (list, tuple)) else (v,)
        return any(getattr(getattr(x, "device", None), "type", None) == "spyre" for x in vals)

    nodes = list(gm.graph.nodes)
    if not any(on_spyre(n) for n in nodes):
        return None
    return tuple((n.name, n.meta["stack_trace"]) for n in nodes if n.meta.get("stack_trace"))


def key_source_lines():
    """Puts source_lines(gm) into every FX graph cache key (FxGraphHashDetails, which
    AOTAutograd's cache details extend): the key is a hash of the details object's fields."""
    from torch._inductor import codecache

    cls = codecache.FxGraphHashDetails
    if getattr(cls.__init__, "_spyre_source_lines", False):
        return
    init = cls.__init__

    def __init__(self, gm, *args, **kwargs):
        init(self, gm, *args, **kwargs)
        self.spyre_source_lines = source_lines(gm)

    __init__._spyre_source_lines = True
    cls.__init__ = __init__
