"""Partitioning: METIS (pymetis) or random assignment, the on-disk format (the renumbering and the shards it holds
are computed by :mod:`sarlab.data.part_layout`).

On disk, a partition is a directory with ``manifest.json`` and one folder per part of plain ``.npy``
arrays (loaded with ``allow_pickle=False``; nothing is ever unpickled). Part ``p`` owns the renumbered
node ids ``node_ranges[p] = [start, end)``. Its in-edges (destination owned by ``p``) are grouped by the
source's owner ``q`` into shards; the source index of a remote shard points into ``recv_rows`` of ``q``
(the sorted local rows of ``q`` that ``p`` needs), the one of the local shard into ``p``'s own rows.

A typed (heterogeneous) graph's parts also hold ``node_type`` (per row) and ``edge_type`` (the relation of each
in-edge, in ``edge_src`` order), and its manifest names the types and relations (``num_relations``,
``relation_names``, ``num_node_types``, ``node_type_names``, ``edges_per_relation``); a manifest without
``num_relations`` is an untyped partition (one relation), as every partition written before types existed.

The manifest carries the sha256 of every array file and of its own content (``manifest_sha256``), so no
field or file can be edited without the loader noticing. Writing never deletes what sarlab did not write:
an existing output directory is replaced only when it is a sarlab partition and ``force`` is given.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass

import numpy as np

from sarlab.data import validate_data as checks
from sarlab.data.graphs import Graph
from sarlab.data.part_layout import PartLayout, part_arrays, part_layout
from sarlab.data.staging import check_free, check_path, probe_writable, staging_dir
from sarlab.data.validate_data import InputError

FORMAT_VERSION = 1
PART_ARRAYS = ("features", "labels", "train_mask", "val_mask", "test_mask", "orig_ids", "edge_src", "edge_dst",
               "edge_ptr", "recv_rows", "recv_ptr", "send_rows", "send_ptr")
#: the extra arrays of a typed (heterogeneous) graph's parts: node type per row, relation per in-edge
TYPED_ARRAYS = ("node_type", "edge_type")
#: name prefix of the staging directory a partition is written into beside its target (``.partition-<pid>-*``)
STAGING_PREFIX = ".partition-"


class PartitionError(InputError):
    """A partition directory is missing, corrupt, or does not fit the requested run."""


class UnverifiedManifestWarning(UserWarning):
    """A manifest written before manifests carried their own checksum: its fields cannot be verified."""


def assign_parts(graph: Graph, num_parts: int, method: str = "metis", seed: int = 0) -> np.ndarray:
    """Part id of every node: METIS (balanced nodes, minimal edge cut) or uniformly random.

    Args:
        graph: the graph; METIS sees it symmetrized.
        num_parts: number of parts (>= 1).
        method: ``metis`` or ``random``.
        seed: seed for METIS and for the random assignment.
    """
    n = graph.num_nodes
    if num_parts < 1:
        raise InputError(f"number of parts must be >= 1, got {num_parts}")
    if num_parts > n:
        raise InputError(f"cannot split {n} nodes into {num_parts} parts")
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64)
    if method == "random":
        rng = np.random.default_rng(seed)
        return rng.permutation(np.arange(n) % num_parts).astype(np.int64)
    if method != "metis":
        raise InputError(f"unknown partition method {method!r}: use 'metis' or 'random'")
    import pymetis

    key = np.concatenate([graph.src * n + graph.dst, graph.dst * n + graph.src])
    key = np.sort(key)
    key = key[np.concatenate([[True], key[1:] != key[:-1]])] if key.size else key
    rows, cols = key // n, key % n
    xadj = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=xadj[1:])
    opts = pymetis.Options(seed=seed)
    _, membership = pymetis.part_graph(num_parts, adjacency=pymetis.CSRAdjacency(xadj.astype(np.int32),
                                                                                 cols.astype(np.int32)),
                                       options=opts)
    parts = np.asarray(membership, dtype=np.int64)
    counts = np.bincount(parts, minlength=num_parts)
    if (counts == 0).any():
        raise PartitionError(f"METIS left part(s) {np.flatnonzero(counts == 0).tolist()} empty; "
                             f"use fewer parts or --method random")
    return parts


def file_sha256(path: str) -> str:
    """The sha256 hex digest of a file (read in 4 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_digest(manifest: dict) -> str:
    """sha256 of a manifest's content without its ``manifest_sha256`` field (canonical JSON: sorted keys)."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def foreign_entries(path: str) -> list[str] | None:
    """Entries of ``path`` that a sarlab partition does not hold; None when ``path`` is no sarlab partition.

    A sarlab partition holds ``manifest.json`` and ``part<p>/`` folders with only the files its manifest lists.
    """
    manifest = _read_json(os.path.join(path, "manifest.json"))
    if not isinstance(manifest, dict) or not {"format_version", "files", "node_ranges"} <= set(manifest):
        return None
    listed = set(manifest["files"]) if isinstance(manifest["files"], dict) else set()
    foreign = []
    for entry in sorted(os.listdir(path)):
        full = os.path.join(path, entry)
        if entry == "manifest.json":
            continue
        if entry.startswith("part") and entry[4:].isdigit() and os.path.isdir(full) and not os.path.islink(full):
            foreign += [f"{entry}/{f}" for f in sorted(os.listdir(full)) if f"{entry}/{f}" not in listed]
        else:
            foreign.append(entry)
    return foreign


def check_output_dir(out_dir: str, force: bool = False) -> str:
    """Decide whether a partition may be written to ``out_dir``: ``"new"`` (absent or empty) or
    ``"replace"`` (a sarlab partition, and ``force``); anything else raises :class:`PartitionError`.

    Nothing sarlab did not write is ever deleted: a file, a link, a non-empty directory that is not a sarlab
    partition, or a partition holding other files, is refused even with ``force``. The path must be one a file
    system can hold and its nearest existing folder writable (:mod:`sarlab.data.staging`).
    """
    check_path(out_dir, "output directory")
    probe_writable(os.path.dirname(os.path.abspath(out_dir)), f"output directory {out_dir!r}")
    if os.path.islink(out_dir):
        raise PartitionError(f"output {out_dir!r} is a symbolic link; give the directory itself or a new path")
    if not os.path.exists(out_dir):
        return "new"
    if not os.path.isdir(out_dir):
        raise PartitionError(f"output {out_dir!r} is a file, not a directory; choose a new directory path")
    if not os.listdir(out_dir):
        return "new"
    foreign = foreign_entries(out_dir)
    if foreign is None:
        raise PartitionError(f"output directory {out_dir!r} exists, is not empty and is not a sarlab partition; "
                             "refusing to touch it: choose a new or empty directory")
    if foreign:
        shown = ", ".join(foreign[:5]) + (" ..." if len(foreign) > 5 else "")
        raise PartitionError(f"output directory {out_dir!r} is a sarlab partition but also holds files sarlab did "
                             f"not write ({shown}); refusing to replace it: move them or choose another directory")
    if not force:
        raise PartitionError(f"output directory {out_dir!r} already holds a sarlab partition; pass --force "
                             "(force=True) to replace it, or choose another directory")
    return "replace"


def _install(tmp: str, out_dir: str, force: bool) -> None:
    """Move the finished partition ``tmp`` to ``out_dir``: a rename, or for a replacement two renames (old
    partition aside, new one in) and then the old one deleted; at every instant one whole partition exists."""
    if check_output_dir(out_dir, force) == "new":
        os.replace(tmp, out_dir)  # rename(2) also replaces an empty directory
        return
    parent = os.path.dirname(os.path.abspath(out_dir))
    old = tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-old-", dir=parent)
    os.replace(out_dir, old)
    try:
        os.replace(tmp, out_dir)
    except BaseException:
        os.replace(old, out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_partition(graph: Graph, parts: np.ndarray, out_dir: str, source: str = "", method: str = "metis",
                    seed: int = 0, progress=None, force: bool = False) -> dict:
    """Renumber nodes part by part and write the partition directory; returns the manifest.

    Written into a temporary sibling directory and renamed at the end, so a failure never leaves a
    half-written partition behind. ``out_dir`` must be new or empty, or a sarlab partition with ``force``
    (see :func:`check_output_dir`).
    """
    check_output_dir(out_dir, force)
    checks.check_graph(graph)
    return _write_checked(graph, parts, out_dir, source, method, seed, progress, force)


def _written_bytes(graph: Graph, halo_rows: int) -> int:
    """Bytes a partition of ``graph`` takes on disk: its node arrays, int64 in-edges, halo and send lists."""
    return int(graph.features.nbytes + graph.num_nodes * (8 + 8 + 3) + graph.num_edges * 16 + halo_rows * 16)


def _write_checked(graph: Graph, parts: np.ndarray, out_dir: str, source: str, method: str, seed: int, progress,
                   force: bool) -> dict:
    """:func:`write_partition` of a graph that passed :func:`~sarlab.data.validate_data.check_graph`."""
    if parts.shape != (graph.num_nodes,) or (parts.size and parts.min() < 0):
        raise InputError(f"part assignment must give each of the {graph.num_nodes} nodes a part id >= 0")
    num_parts = int(parts.max()) + 1 if parts.size else 1
    counts = np.bincount(parts, minlength=num_parts)
    if (counts == 0).any():
        raise PartitionError(f"part(s) {np.flatnonzero(counts == 0).tolist()} would be empty; use fewer parts")
    layout = part_layout(graph, parts, counts)
    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    check_free(parent, _written_bytes(graph, sum(map(sum, layout.halo_rows))), f"partition {out_dir!r}")
    tmp = staging_dir(parent, STAGING_PREFIX)  # .partition-<pid>-*: a killed run's is swept by the next one
    files = {}
    try:
        for p in range(num_parts):
            os.makedirs(os.path.join(tmp, f"part{p}"))
            for name, arr in part_arrays(graph, layout, p).items():
                rel = f"part{p}/{name}.npy"
                np.save(os.path.join(tmp, rel), np.ascontiguousarray(arr), allow_pickle=False)
                files[rel] = file_sha256(os.path.join(tmp, rel))
            if progress:
                progress(f"wrote part {p + 1}/{num_parts}")
        manifest = _manifest(graph, layout, source, method, seed, files)
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        _install(tmp, out_dir, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _manifest(graph: Graph, layout: PartLayout, source: str, method: str, seed: int, files: dict[str, str]) -> dict:
    """The manifest of a partition of ``graph`` laid out as ``layout`` whose array files have the sha256 ``files``,
    with its own checksum (``manifest_sha256``)."""
    num_parts, starts = layout.num_parts, layout.starts
    manifest = {
        "format_version": FORMAT_VERSION,
        "graph": graph.name,
        "source": source,
        "method": method,
        "seed": seed,
        "num_parts": num_parts,
        "num_nodes": graph.num_nodes,
        "num_edges": graph.num_edges,
        "feature_dim": graph.feature_dim,
        "num_classes": graph.num_classes,
        "feature_dtype": str(graph.features.dtype),
        "node_ranges": [[int(starts[p]), int(starts[p + 1])] for p in range(num_parts)],
        "edges_per_shard": layout.edges_per_shard.tolist(),
        "halo_rows": layout.halo_rows,
        "train_nodes": int(graph.train_mask.sum()),
        **(typed_manifest_fields(graph) if graph.typed else {}),
        "files": files,
    }
    manifest["manifest_sha256"] = manifest_digest(manifest)
    return manifest


def typed_manifest_fields(graph: Graph) -> dict:
    """The manifest fields of a typed graph: its node types and relations, and the edges of each relation."""
    return {"num_node_types": len(graph.node_type_names), "node_type_names": list(graph.node_type_names),
            "num_relations": graph.num_relations, "relation_names": list(graph.relation_names),
            "edges_per_relation": np.bincount(graph.edge_type, minlength=graph.num_relations).astype(int).tolist()}


def part_array_names(manifest: dict) -> tuple[str, ...]:
    """The arrays every part of this partition holds (a typed one also ``node_type`` and ``edge_type``)."""
    return PART_ARRAYS + (TYPED_ARRAYS if "num_relations" in manifest else ())


def partition(graph: Graph, num_parts: int, out_dir: str, method: str = "metis", seed: int = 0,
              source: str = "", progress=None, force: bool = False) -> dict:
    """Assign, renumber and write ``graph`` as ``num_parts`` parts into ``out_dir``; returns the manifest.

    ``out_dir`` must be new or empty, or hold a sarlab partition and ``force`` be given (checked first,
    before any compute; see :func:`check_output_dir`).
    """
    check_output_dir(out_dir, force)
    checks.check_graph(graph)
    t0 = time.perf_counter()
    parts = assign_parts(graph, num_parts, method, seed)
    if progress:
        progress(f"{method} assignment of {graph.num_nodes} nodes into {num_parts} parts: "
                 f"{time.perf_counter() - t0:.1f}s")
    return _write_checked(graph, parts, out_dir, source, method, seed, progress, force)


def is_partition_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "manifest.json"))


def load_manifest(path: str) -> dict:
    """Read ``manifest.json`` of a partition directory and check its checksum and the consistency of its fields.

    A manifest without ``manifest_sha256`` (written by sarlab before it had one) is accepted with an
    :class:`UnverifiedManifestWarning`: its array files are still sha256-checked and its fields checked
    against each other and against the arrays, but a consistent hand edit would pass.
    """
    mpath = os.path.join(path, "manifest.json")
    if not os.path.isfile(mpath):
        raise PartitionError(f"{path!r} is not a partition directory: {mpath} is missing "
                             "(create one with `sarlab partition`)")
    try:
        with open(mpath) as f:
            manifest = json.load(f)
    except json.JSONDecodeError as err:
        raise PartitionError(f"{mpath} is not valid JSON ({err}); re-create the partition") from err
    if manifest.get("format_version") != FORMAT_VERSION:
        raise PartitionError(f"{mpath}: format version {manifest.get('format_version')!r}, this sarlab reads "
                             f"{FORMAT_VERSION}; re-create the partition")
    if "manifest_sha256" not in manifest:
        warnings.warn(f"{mpath} has no checksum of its own (written by an older sarlab): its fields cannot be "
                      "verified; re-create the partition to protect them", UnverifiedManifestWarning, stacklevel=2)
    elif manifest["manifest_sha256"] != manifest_digest(manifest):
        raise PartitionError(f"{mpath} was edited after sarlab wrote it (its manifest_sha256 does not match its "
                             "content); re-create the partition rather than editing the manifest")
    _check_confined(manifest, mpath)  # before anything is looked up by those names
    try:
        checks.check_manifest_fields(manifest, PART_ARRAYS, mpath)
    except InputError as err:
        raise PartitionError(str(err)) from None
    return manifest


def _check_confined(manifest: dict, mpath: str) -> None:
    """Every ``files`` entry names a file inside its part folder: ``part<p>/<name>``, no ``..``, no absolute path,
    no link out of the directory."""
    for rel in manifest["files"] if isinstance(manifest.get("files"), dict) else ():
        pieces = rel.split("/") if isinstance(rel, str) else []
        if (len(pieces) != 2 or not re.fullmatch(r"part\d+", pieces[0]) or pieces[1] in ("", ".", "..")
                or "\\" in rel or "\0" in rel):
            raise PartitionError(f"{mpath} lists {rel!r}, which is not a file of a part folder (part<p>/<name>); "
                                 "re-create the partition")
        full = os.path.join(os.path.dirname(mpath), rel)
        link = next((p for p in (os.path.dirname(full), full) if os.path.islink(p)), None)  # the folder first
        if link:
            raise PartitionError(f"{link} is a link; a partition holds plain folders and files only: re-create the "
                                 "partition")


def verify_files(path: str, manifest: dict, parts: list[int] | None = None) -> None:
    """Check that every file of the given parts exists and matches its sha256 in the manifest."""
    wanted = None if parts is None else {f"part{p}/" for p in parts}
    for rel, digest in manifest["files"].items():
        if wanted is not None and not any(rel.startswith(w) for w in wanted):
            continue
        full = os.path.join(path, rel)
        if not os.path.isfile(full):
            raise PartitionError(f"partition file missing: {full}; re-create the partition")
        if file_sha256(full) != digest:
            raise PartitionError(f"partition file corrupt (sha256 mismatch): {full}; re-create the partition")


@dataclass(frozen=True)
class Partition:
    """One part as numpy arrays (see the module docstring for the meaning of each array)."""

    part: int
    num_parts: int
    node_start: int
    node_end: int
    num_classes: int
    num_train_global: int
    num_nodes_global: int
    feature_dim: int
    arrays: dict
    num_relations: int = 1

    @property
    def num_nodes(self) -> int:
        return self.node_end - self.node_start


def load_part(path: str, part: int, manifest: dict | None = None, verify: bool = True) -> Partition:
    """Load part ``part`` (verifying sha256 of its files unless ``verify=False``)."""
    manifest = manifest or load_manifest(path)
    if not 0 <= part < manifest["num_parts"]:
        raise PartitionError(f"part {part} requested but {path} has {manifest['num_parts']} parts")
    if verify:
        verify_files(path, manifest, [part])
    arrays = {}
    for name in part_array_names(manifest):
        full = os.path.join(path, f"part{part}/{name}.npy")
        try:
            arrays[name] = np.load(full, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise PartitionError(f"partition file unreadable: {full} ({err}); re-create the partition") from err
    try:
        checks.check_part_arrays(arrays, manifest, part, f"{path} part {part}")
    except InputError as err:
        raise PartitionError(str(err)) from None
    start, end = manifest["node_ranges"][part]
    return Partition(part, manifest["num_parts"], start, end, manifest["num_classes"], manifest["train_nodes"],
                     manifest["num_nodes"], manifest["feature_dim"], arrays, manifest.get("num_relations", 1))


def check_partition(path: str, manifest: dict | None = None) -> dict:
    """Load and check every part of a partition directory before compute; returns the manifest.

    Per part: files exist and match their sha256, arrays agree with the manifest (see :func:`load_part`).
    Across parts: ``orig_ids`` number every node once, the train split has ``train_nodes`` nodes, and the
    class count is not inflated by an outlier label.
    """
    manifest = manifest or load_manifest(path)
    n = manifest["num_nodes"]
    seen = np.zeros(n, dtype=bool)
    train, labels = 0, []
    for p in range(manifest["num_parts"]):
        a = load_part(path, p, manifest).arrays
        seen[a["orig_ids"]] = True
        train += int(a["train_mask"].sum())
        labels.append(np.unique(a["labels"]))
    if not seen.all():
        raise PartitionError(f"{path}: orig_ids miss {int((~seen).sum())} of {n} nodes; re-create the partition")
    if train != manifest["train_nodes"]:
        raise PartitionError(f"{path}: the parts hold {train} train nodes, the manifest says "
                             f"{manifest['train_nodes']}; re-create the partition")
    try:
        checks.check_manifest_classes(np.unique(np.concatenate(labels)), manifest, path)
    except InputError as err:
        raise PartitionError(str(err)) from None
    return manifest


def report(manifest: dict) -> str:
    """Human-readable partition report: edge cut, halo rows per pair of parts, balance."""
    p = manifest["num_parts"]
    eps = np.asarray(manifest["edges_per_shard"])
    halo = np.asarray(manifest["halo_rows"])
    sizes = np.array([e - s for s, e in manifest["node_ranges"]])
    total = int(eps.sum())
    cut = total - int(np.trace(eps))
    lines = [f"graph {manifest['graph']}: {manifest['num_nodes']} nodes, {total} edges, {p} parts "
             f"({manifest['method']}, seed {manifest['seed']})",
             f"edge cut: {cut} edges ({100.0 * cut / max(total, 1):.1f}% of all edges)",
             f"balance: nodes per part min {sizes.min()} max {sizes.max()} "
             f"(max/mean {sizes.max() / sizes.mean():.3f}); in-edges per part max/mean "
             f"{eps.sum(1).max() / max(eps.sum(1).mean(), 1):.3f}",
             f"halo rows: total {int(halo.sum())} ({halo.sum() / max(manifest['num_nodes'], 1):.2f} x nodes)"]
    if "num_relations" in manifest:
        lines.append(f"{manifest['num_relations']} relations, edges: " + ", ".join(
            f"{name} {count}" for name, count in zip(manifest["relation_names"], manifest["edges_per_relation"])))
    if p <= 16:
        lines.append("halo rows [needed by row part, owned by column part]:")
        width = max(6, len(str(int(halo.max()))) + 1)
        lines.append("      " + "".join(f"{q:>{width}}" for q in range(p)))
        for i in range(p):
            lines.append(f"{i:>5} " + "".join(f"{int(v):>{width}}" for v in halo[i]))
    return "\n".join(lines)
