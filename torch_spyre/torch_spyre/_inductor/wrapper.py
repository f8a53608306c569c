"""The Python wrapper of compiled spyre graphs: Inductor's, with each extern kernel call
labeled (Documentation/torch_compile.md "Errors") and each call submitted to the card as one
submission (runtime.batched; torch_compile.md "Submissions per call").

A matmul, attention or any other op the wrapper calls as an extern kernel (or as the eager
fallback of an op without a lowering) runs inside ``with <LaunchLabel>:``, so its launches name
the extern kernel, the compiled graph and the FX node it came from, as a generated kernel's do,
whether the graph is replayed or not. The labels are module-level constants of the generated
code: a call pays one push and one pop per extern kernel.
"""

from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

from .labels import origin_label


class SpyreWrapperCodegen(PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper):
        if is_subgraph:
            return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper)
        return SpyreWrapperCodegen()

    def __init__(self):
        super().__init__()
        self._labels = {}  # label text -> its module-level name
        self._in_layout_imported = False

    def generate_end(self, result):
        super().generate_end(result)
        devices = sorted(V.graph.device_idxs) if "spyre" in V.graph.device_types else []
        if devices:
            result.writeline("from torch_spyre._inductor.runtime import batched as _spyre_batched")
            result.writeline(f"call = _spyre_batched(call, {devices!r})")

    def _label_name(self, kernel, node):
        # the FX nodes of the kernel's own op: its origins can also hold the nodes of an input
        # Inductor computed for it (all of them when none is the op: a pattern's replacement)
        fx_nodes = getattr(node, "origins", None) or ()
        op = getattr(node, "op_overload", None)
        origin = node.get_origin_node() if hasattr(node, "get_origin_node") else None
        own = [origin] if origin is not None else [o for o in fx_nodes if o.target == op]
        fx_nodes = own or fx_nodes
        text = origin_label(f"extern kernel {kernel}", fx_nodes)
        name = self._labels.get(text)
        if name is None:
            name = self._labels[text] = f"_spyre_label_{len(self._labels)}"
            if len(self._labels) == 1:
                self.header.writeline("from torch_spyre._inductor.labels import LaunchLabel")
            self.header.writeline(f"{name} = LaunchLabel({text!r})")
        return name

    def _labeled(self, kernel, node, emit):
        """Runs ``emit`` (the base class's code for the call) and puts the first line it
        wrote, the call, inside the label's ``with``."""
        name = self._label_name(kernel, node)
        start = len(self.lines)
        emit()
        for i in range(start, len(self.lines)):
            line = self.lines[i]
            if isinstance(line, str) and line.strip() and not line.lstrip().startswith("#"):
                self.lines[i] = f"with {name}: {line}"
                return

    @staticmethod
    def _buffer(name):
        return V.graph.try_get_buffer(name) if isinstance(name, str) else None

    def codegen_multi_output(self, name, value):
        """An element of an extern kernel's tuple result (attention's output, a sort's values,
        the result of an op run as Inductor's fallback kernel): Inductor checks the size and
        strides of single results against the op's meta kernel but not of these, and the
        kernels after it index them by the meta strides, so a kernel that returned another
        layout (a spyre kernel's dense result where the meta follows a transposed input) would
        be read wrongly without a word. runtime.in_layout makes it that layout (a copy on the
        card when it is not) and refuses another size."""
        super().codegen_multi_output(name, value)
        buf = self._buffer(name)
        try:
            size = self.codegen_shape_tuple(buf.get_size())
            stride = self.codegen_shape_tuple(buf.get_stride())
        except (AttributeError, NotImplementedError, TypeError):
            return  # not a tensor of a fixed layout
        if not self._in_layout_imported:
            self._in_layout_imported = True
            self.header.writeline(
                "from torch_spyre._inductor.runtime import in_layout as _spyre_in_layout")
        self.writeline(f"{name} = _spyre_in_layout({name}, {size}, {stride})")

    def generate_extern_kernel_out(self, kernel, out, out_view, args):
        self._labeled(kernel, self._buffer(out),
                      lambda: super(SpyreWrapperCodegen, self).generate_extern_kernel_out(
                          kernel, out, out_view, args))

    def generate_extern_kernel_alloc(self, extern_kernel, args):
        self._labeled(extern_kernel.get_kernel_name(), extern_kernel,
                      lambda: super(SpyreWrapperCodegen, self).generate_extern_kernel_alloc(
                          extern_kernel, args))

    def generate_fallback_kernel_with_runtime_lookup(self, buf_name, python_kernel_name,
                                                     *args, **kwargs):
        self._labeled(python_kernel_name, self._buffer(buf_name),
                      lambda: super(SpyreWrapperCodegen, self)
                      .generate_fallback_kernel_with_runtime_lookup(
                          buf_name, python_kernel_name, *args, **kwargs))

    def generate_scatter_fallback(self, output, inputs, cpp_kernel_name, python_kernel_name,
                                  *args, **kwargs):
        self._labeled(python_kernel_name, self._buffer(output),
                      lambda: super(SpyreWrapperCodegen, self).generate_scatter_fallback(
                          output, inputs, cpp_kernel_name, python_kernel_name, *args,
                          **kwargs))

    def generate_index_put_fallback(self, kernel, x, indices, values, accumulate):
        self._labeled(kernel, self._buffer(x),
                      lambda: super(SpyreWrapperCodegen, self).generate_index_put_fallback(
                          kernel, x, indices, values, accumulate))
