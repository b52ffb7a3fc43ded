"""The simulator's R-GCN: relation counts of a typed partition, per-(shard, relation) ops, bytes and memory.

The reference is a hand count on a tiny typed graph (8 nodes, 2 parts, 2 relations, 10 edges) written out below.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_simulator_fixtures import hand_profile

from sarlab.simulator.hardware.profile import load_profile
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.pricing import EpochPricing
from sarlab.simulator.system.replay import model_for
from sarlab.simulator.system.runspec import RunSpec, resolve_placement
from sarlab.simulator.workload.layers import layer_plans
from sarlab.simulator.workload.model import ModelSpec, parse_model
from sarlab.simulator.workload.ops import ZERO_FILL_PASSES
from sarlab.simulator.workload.rgcn_workload import RelationMix, estimate_relations, mag_mix, mag_partition
from sarlab.simulator.workload.workload import load_manifest

# (source, destination, relation); part 0 owns nodes 0-3, part 1 nodes 4-7
EDGES = [(1, 0, 0), (2, 0, 0), (3, 1, 1), (5, 0, 0), (6, 0, 1), (6, 2, 1), (5, 3, 0),
         (0, 4, 0), (0, 5, 1), (7, 6, 1)]
# by hand: part 0's shard from part 0 has relation 0: 2 edges into row {0}, relation 1: 1 edge into {1}; its shard
# from part 1: relation 0: 2 edges into {0, 3}, relation 1: 2 edges into {0, 2}; halo from part 1: {5, 6}.
# part 1's shard from part 0: one edge of each relation, into {4} and {5}; halo {0}; its own: relation 1 into {6}
HAND_EDGES = [[[2, 1], [2, 2]], [[1, 1], [0, 1]]]
HAND_ROWS = [[[1, 1], [2, 2]], [[1, 1], [0, 1]]]
HAND_ROWS_ALL = [[2, 3], [1, 2]]  # part 0: r0 {0, 3}, r1 {0, 1, 2}; part 1: r0 {4}, r1 {5, 6}
HALO = [[0, 2], [1, 0]]


def rgcn(**fields) -> ModelSpec:
    """An R-GCN as the engine's defaults build it: aggregate first, no BatchNorm, no dropout."""
    return ModelSpec(**{"model": "rgcn", "fused": True, "batchnorm": False, "dropout": 0.0, **fields})


def write_typed_partition(path) -> None:
    """The graph above as a 2-part partition directory (manifest + each part's in-edges grouped by source part)."""
    starts = [0, 4]
    for p in range(2):
        mine = [(s, d, r) for s, d, r in EDGES if starts[p] <= d < starts[p] + 4]
        mine.sort(key=lambda e: e[0] >= 4)  # grouped by source part
        counts = [sum(1 for s, _, _ in mine if (s >= 4) == bool(q)) for q in range(2)]
        part = path / f"part{p}"
        part.mkdir(parents=True)
        np.save(part / "edge_ptr.npy", np.array([0, counts[0], counts[0] + counts[1]], dtype=np.int64))
        np.save(part / "edge_dst.npy", np.array([d - starts[p] for _, d, _ in mine], dtype=np.int64))
        np.save(part / "edge_type.npy", np.array([r for _, _, r in mine], dtype=np.int64))
    manifest = {"format_version": 1, "graph": "tiny-typed", "method": "metis", "num_parts": 2, "num_nodes": 8,
                "num_edges": len(EDGES), "feature_dim": 3, "num_classes": 2, "node_ranges": [[0, 4], [4, 8]],
                "edges_per_shard": np.sum(HAND_EDGES, axis=2).tolist(), "halo_rows": HALO,
                "num_relations": 2, "relation_names": ["a/r0/b", "b/r1/a"]}
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def typed(tmp_path):
    write_typed_partition(tmp_path)
    return load_manifest(tmp_path)


def test_relation_counts_match_the_hand_count(typed):
    rel = typed.relations
    assert rel.names == ("a/r0/b", "b/r1/a")
    np.testing.assert_array_equal(rel.edges, HAND_EDGES)
    np.testing.assert_array_equal(rel.rows, HAND_ROWS)
    np.testing.assert_array_equal(rel.rows_all, HAND_ROWS_ALL)


def test_forward_and_backward_ops_of_one_shard(typed):
    """Part 0's shard from part 1, input width 3, output 2, float32: relations 0 and 1 both have 2 edges into 2 rows
    of 2 halo rows. Forward: spmm 4 edges x 3, 4 rows x 3 written (48 fresh bytes), gathering a 2 x 3 matrix
    (24 bytes), scaling 2*4*3*4, W_r 2*4*3*2 FLOP, index_add 3*4*2*4 bytes; two relation blocks = two calls each."""
    plan = layer_plans(rgcn(layers=1, relations=2), 3, 2)[0].with_relations(typed.relations)
    n = typed.nodes_per_part[:, None].astype(float)
    src = np.where(np.eye(2, dtype=bool), n, typed.halo_rows)
    fwd = plan.shard_fwd(typed.edges_per_shard.astype(float), n, src)
    got = [(op.family, float(np.asarray(op.work)[0, 1]), float(np.asarray(op.calls)[0, 1])) for op in fwd]
    assert got == [("spmm", 12.0, 2.0), ("elementwise", 96.0, 2.0), ("gemm", 48.0, 2.0), ("elementwise", 96.0, 2.0)]
    spmm = fwd[0]
    assert (spmm.rows[0, 1], spmm.gather_bytes[0, 1], spmm.fresh[0, 1]) == (12.0, 24.0, 48.0)
    bwd = plan.shard_bwd(typed.edges_per_shard.astype(float), n, src)
    zero_fill = bwd[0].work
    assert zero_fill[0, 1] == pytest.approx(ZERO_FILL_PASSES * 2 * 3 * 4)  # the gradient buffer for part 1's rows
    assert zero_fill[0, 0] == 0.0 and zero_fill[1, 1] == 0.0  # the local shard adds into the source gradient
    gemm = [op for op in bwd if op.family == "gemm"][0]
    assert gemm.work[0, 1] == 2 * 2 * 4 * 3 * 2  # dW_r and g W_r^T over the 4 rows reached
    # part 1's own shard: relation 1 only, 1 edge into 1 row of 4 source rows
    assert [float(np.asarray(op.work)[1, 1]) for op in fwd] == [3.0, 24.0, 12.0, 24.0]


@pytest.mark.parametrize("fused", [True, False])
def test_sar_refetches_what_oneshot_keeps(typed, fused):
    """Per layer, every exchange carries the 1 + 2 halo rows at the layer's input width (3, then 5): 36 + 60 bytes.
    ``sar`` sends them forward, again in backward (case 2 re-fetch) and their gradients home; ``sa`` and ``oneshot``
    keep them: one exchange of 96 bytes less. Layer 0's rows are the features, which need no gradient: ``oneshot``
    returns none for them (autograd skips its halo exchange's backward), the ring modes' aggregation returns them all
    the same (36 bytes). The all-reduces, the same in every mode, are in all three."""
    spec = rgcn(layers=2, hidden=5, relations=2, fused=fused)
    sent = {mode: simulate_epoch(typed, spec, RunSpec(mode=mode), hand_profile()).bytes_sent.sum()
            for mode in ("sar", "sa", "oneshot")}
    assert sent["sar"] - sent["sa"] == 96
    assert sent["sa"] - sent["oneshot"] == 36
    single = rgcn(layers=1, hidden=5, relations=2, fused=fused)  # one layer: 36 bytes an exchange
    sent1 = {mode: simulate_epoch(typed, single, RunSpec(mode=mode), hand_profile()).bytes_sent.sum()
             for mode in ("sar", "oneshot")}
    assert sent1["sar"] - sent1["oneshot"] == 2 * 36


def test_sar_needs_less_memory_than_oneshot_at_8_workers():
    """ogbn-mag on the cluster preset: ``oneshot`` keeps every layer's ``[own; halo]`` rows (per-edge: every edge's
    gathered row and message) where ``sar`` keeps its own rows only."""
    stats = mag_partition(8)
    prof = load_profile("icelake-hdr200")
    for fused in (True, False):
        spec = rgcn(layers=3, hidden=256, relations=8, fused=fused)
        peak = {mode: simulate_epoch(stats, spec, RunSpec(mode=mode), prof).peak_above_baseline_bytes.max()
                for mode in ("sar", "oneshot")}
        assert peak["sar"] < (0.8 if fused else 0.5) * peak["oneshot"], (fused, peak)


def test_estimated_relations_keep_the_shards_edges(typed):
    est = estimate_relations(typed, RelationMix(("a", "b"), (0.25, 0.75), (0.5, 0.5)))
    np.testing.assert_allclose(est.edges.sum(axis=2), typed.edges_per_shard)
    assert np.all(est.rows <= est.edges) and np.all(est.rows <= 2.0)  # at most one row per edge, 2 rows per type
    mix = mag_mix()
    assert len(mix.names) == 8 and sum(mix.edge_share) == pytest.approx(1.0)


@pytest.mark.parametrize("mode, blocks", [("sar", [480, 240]), ("oneshot", [432 + 152, 256 + 88])])
def test_relation_blocks_are_kept_between_epochs(typed, mode, blocks):
    """Persistent bytes beyond Adam's moments: every relation block a shard builds, by hand (aggregate first): 8 B per
    row reached, 16 per edge (sorted source and destination), 8 per row-pointer entry (rows + 1), and for ``A^T`` 16 per
    edge and 8 per source row + 1. ``sar``, part 0: own shard r0 (2 edges, 1 row, 4 sources) 128 + r1 (1, 1, 4) 96,
    shard from part 1 (2 sources) r0 (2, 2) 128 + r1 (2, 2) 128; part 1: 72 + 72 from part 0 (1 source), 96 own.
    ``oneshot``: one merged shard of 6 and 5 sources (part 0: r0 4 edges into 2 rows 224, r1 3 into 3 208; part 1:
    r0 1 into 1 104, r1 2 into 2 152) plus its edge lists and row pointer (16 e + 8 (n + 1): 152 and 88)."""
    prof, run = hand_profile(), RunSpec(mode=mode)
    spec = rgcn(layers=2, hidden=5, relations=2)
    pricing = EpochPricing(typed, spec, run, prof, resolve_placement(prof, 2, run))
    others = 2.0 * pricing.params * 4 + sum(prof.first_use_bytes.get(f, 0.0) for f in ("spmm", "autograd"))
    np.testing.assert_allclose(pricing.persistent - others, blocks)


def test_records_name_the_model(typed, tmp_path):
    """A measured R-GCN record (``sarlab bench engine``'s columns) gives the R-GCN it ran: ``+edge`` is the per-edge
    order, the relations come from ``num_relations`` or, where records predate it (read as 1), the partition."""
    row = pd.Series({"mode": "sar+edge", "model": "rgcn", "workers": 2, "layers": 3, "hidden": 16, "heads": 4,
                     "aggr": "mean", "fused": False, "batchnorm": False, "dropout": 0.0, "dtype": "float32",
                     "num_relations": 2, "partition_dir": str(tmp_path)})
    spec = model_for(row)
    assert (spec.model, spec.layers, spec.hidden, spec.fused, spec.relations) == ("rgcn", 3, 16, False, 2)
    assert spec.label() == "rgcn-per-edge"
    old = row.copy()
    old["mode"], old["fused"], old["num_relations"] = "oneshot", True, 1
    assert (model_for(old).fused, model_for(old).relations) == (True, 2)  # from tiny-typed's manifest
    assert parse_model("rgcn-per-edge", spec).fused is False and parse_model("rgcn", spec).relations == 2


def test_relations_must_match_the_partition(typed):
    with pytest.raises(ValueError, match="has 2 relations"):
        simulate_epoch(typed, rgcn(layers=1, relations=3), RunSpec(mode="sar"), hand_profile())
