"""``sarlab partition``: split a graph into parts on disk (METIS or random), or convert DGL's partitions, and
say how well it split. An existing output is replaced only when it is a sarlab partition and --force is given."""
from __future__ import annotations

import argparse

from sarlab.data.dgl_import import convert
from sarlab.data.partition import check_output_dir, partition, report
from sarlab.real.commands.options import EPILOG, load_source, progress, write_json
from sarlab.real.launch import outputs, sizing
from sarlab.real.launch.lifecycle import interruptible


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sarlab partition", description="Partition a graph into parts on disk, "
                                "renumbered so each part owns a contiguous node-id range.", epilog=EPILOG)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--graph", help="graph spec")
    source.add_argument("--from-dgl", metavar="PART_CONFIG.json",
                        help="convert the output of DGL's partition_graph (keeps its parts; needs the dgl extra)")
    p.add_argument("--parts", type=int, help="number of parts (with --graph)")
    p.add_argument("--out", required=True, help="output directory: new or empty, or a sarlab partition with --force")
    p.add_argument("--force", action="store_true", help="replace an existing sarlab partition at --out and an "
                   "existing --json file, and go on although the memory estimate exceeds what is available")
    p.add_argument("--method", default="metis", choices=["metis", "random"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dgl-orig-ids", metavar="PATH",
                   help="with --from-dgl: orig_nids that partition_graph(return_mapping=True) returned (.npy/.pt), "
                        "to keep the graph's original node ids (default: DGL's reshuffled ids)")
    p.add_argument("--dgl-keys", default="", metavar="K=NAME,...",
                   help="with --from-dgl: DGL node data names, e.g. features=feat,labels=label,train=train_mask")
    p.add_argument("--json", help="write the manifest summary here")
    return p


@interruptible
def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.graph is not None and (a.parts is None or a.parts < 1):
        p.error("--graph needs --parts N with N >= 1")
    if a.from_dgl is not None and (a.parts is not None or a.method != "metis"):
        p.error("--from-dgl keeps DGL's parts: drop --parts/--method")
    if a.from_dgl is None and (a.dgl_orig_ids or a.dgl_keys):
        p.error("--dgl-orig-ids and --dgl-keys go with --from-dgl")
    check_output_dir(a.out, a.force)  # before loading anything: a refused --out costs nothing
    if a.json:
        outputs.check_output_file(a.json, "json", a.force)
    if a.graph is not None:
        sizing.check_partition_size(a.graph, a.parts, a.force, progress, out_dir=a.out)
    if a.from_dgl:
        manifest = convert(a.from_dgl, a.out, keys=a.dgl_keys, orig_ids=a.dgl_orig_ids, force=a.force,
                           progress=progress)
    else:
        graph = load_source(a.graph)
        manifest = partition(graph, a.parts, a.out, method=a.method, seed=a.seed, source=a.graph,
                             progress=progress, force=a.force)
    print(report(manifest))
    write_json(a.json, {k: v for k, v in manifest.items() if k != "files"})
    return 0
