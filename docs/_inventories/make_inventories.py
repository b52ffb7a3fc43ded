"""Write the small intersphinx inventories this site links torch, PyG, numpy and pandas names with, offline.

The docs build (and ``make test``) has no network, so ``conf.py`` reads the ``objects.inv`` files in this folder
instead of each project's own. They are hand-made stand-ins: only the names sarlab's pages and docstrings cite,
each with the address it has on that project's site (the layout of their Sphinx pages as of 2026-11). A name
missing here renders as plain text, not a warning or a broken link. Regenerate after editing ``NAMES``:
``python docs/_inventories/make_inventories.py``; where the network is open, the projects' own inventories
(``<base>/objects.inv``) may replace these files as they are.

Format: Sphinx inventory version 2 (four header lines, then zlib-compressed lines
``name domain:role priority uri display-name``; ``-`` as display name is the name itself). In ``NAMES`` a
``$`` in a uri stands for the name; it is spelt out here, since Sphinx expands only a trailing one.
"""
from __future__ import annotations

import os
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))

#: project -> (name written in the header, version, [(name, role, uri relative to the project's base address)])
NAMES: dict[str, tuple[str, str, list[tuple[str, str, str]]]] = {
    "torch": ("PyTorch", "stable", [
        ("torch", "py:module", "torch.html#module-torch"),
        ("torch.Tensor", "py:class", "tensors.html#$"),
        ("torch.dtype", "py:class", "tensor_attributes.html#$"),
        ("torch.device", "py:class", "tensor_attributes.html#$"),
        ("torch.nn.Module", "py:class", "generated/$.html#$"),
        ("torch.nn.modules.module.Module", "py:class", "generated/torch.nn.Module.html#torch.nn.Module"),
        ("torch.nn.Linear", "py:class", "generated/$.html#$"),
        ("torch.nn.Parameter", "py:class", "generated/torch.nn.parameter.Parameter.html#torch.nn.parameter.Parameter"),
        ("torch.optim.Optimizer", "py:class", "optim.html#$"),
        ("torch.autograd.Function", "py:class", "autograd.html#$"),
        ("torch.autograd.grad", "py:function", "generated/$.html#$"),
        ("torch.load", "py:function", "generated/$.html#$"),
        ("torch.save", "py:function", "generated/$.html#$"),
        ("torch.distributed", "py:module", "distributed.html#module-torch.distributed"),
        ("torch.distributed.ProcessGroup", "py:class", "distributed.html#$"),
    ]),
    "torch_geometric": ("pytorch_geometric", "latest", [
        ("torch_geometric", "py:module", "index.html#module-torch_geometric"),
        ("torch_geometric.data.Data", "py:class", "generated/$.html#$"),
        ("torch_geometric.data.data.Data", "py:class",
         "generated/torch_geometric.data.Data.html#torch_geometric.data.Data"),
        ("torch_geometric.nn.conv.MessagePassing", "py:class", "generated/$.html#$"),
        ("torch_geometric.nn.conv.GCNConv", "py:class", "generated/$.html#$"),
        ("torch_geometric.nn.conv.SAGEConv", "py:class", "generated/$.html#$"),
        ("torch_geometric.nn.conv.GATConv", "py:class", "generated/$.html#$"),
        ("torch_geometric.nn.conv.RGCNConv", "py:class", "generated/$.html#$"),
        ("torch_geometric.datasets.Planetoid", "py:class", "generated/$.html#$"),
        ("torch_geometric.loader.NeighborLoader", "py:class", "generated/$.html#$"),
    ]),
    "numpy": ("NumPy", "stable", [
        ("numpy", "py:module", "reference/index.html#module-numpy"),
        ("numpy.ndarray", "py:class", "reference/generated/$.html#$"),
        ("numpy.dtype", "py:class", "reference/generated/$.html#$"),
        ("numpy.random.Generator", "py:class", "reference/random/generator.html#$"),
    ]),
    "pandas": ("pandas", "stable", [
        ("pandas", "py:module", "reference/index.html#module-pandas"),
        ("pandas.DataFrame", "py:class", "reference/api/$.html#$"),
        ("pandas.core.frame.DataFrame", "py:class", "reference/api/pandas.DataFrame.html#pandas.DataFrame"),
        ("pandas.Series", "py:class", "reference/api/$.html#$"),
        ("pandas.core.series.Series", "py:class", "reference/api/pandas.Series.html#pandas.Series"),
        ("pandas.read_csv", "py:function", "reference/api/$.html#$"),
        ("pandas.read_json", "py:function", "reference/api/$.html#$"),
    ]),
}


def inventory(project: str, version: str, entries: list[tuple[str, str, str]]) -> bytes:
    """The bytes of one ``objects.inv`` (version 2) holding ``entries``."""
    header = (f"# Sphinx inventory version 2\n# Project: {project}\n# Version: {version}\n"
              "# The remainder of this file is compressed using zlib.\n")
    body = "".join(f"{name} {role} 1 {uri.replace('$', name)} -\n" for name, role, uri in sorted(entries))
    return header.encode() + zlib.compress(body.encode(), 9)


def main() -> None:
    for key, (project, version, entries) in NAMES.items():
        path = os.path.join(HERE, f"{key}.inv")
        with open(path, "wb") as fh:
            fh.write(inventory(project, version, entries))
        print(f"{path}: {len(entries)} names")


if __name__ == "__main__":
    main()
