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
