"""GAT in every mode, fused and unfused, against PyG ``GATConv`` with copied weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GATConv as PyGGATConv

import sarlab.nn.gat as gat_module
from sarlab import kernels
from sarlab.core.aggregate import ShardAggregate
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import Graph, synthetic_graph
from sarlab.kernels import torch_backend
from sarlab.nn import GATConv
from sarlab.nn.model import ModelConfig
from sarlab.real.commands.verify import format_table, verify

HEADS = (1, 2, 4, 8)


def _check(rows):
    table = format_table(rows)
    assert all(r.ok for r in rows), "\n" + table
    print("\n" + table)


def _variants(dtypes=("float64", "float32"), self_loops=True, **kw):
    out, i = [], 0
    for dtype in dtypes:
        for mode in ("sar", "sa", "oneshot"):
            for fused in (True, False):
                cfg = dict(model="gat", layers=3, hidden=16, heads=HEADS[i % 4], dropout=0.3, batchnorm=True,
                           self_loops=self_loops, seed=7)
                cfg.update(kw)
                out.append((ModelConfig(**cfg), EngineConfig(mode=mode, fused=fused), dtype))
                i += 1
    return out


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=300, degree=6, features=12, classes=4, seed=5)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [pytest.param(1, marks=pytest.mark.slow), 2,
                                     pytest.param(3, marks=pytest.mark.slow), 4])  # 1 and 3 with -m slow
def test_gat_all_modes_heads_fused_unfused(graph, workers):
    rows = verify(graph, workers, _variants(), timeout_s=120, progress=lambda m: None)
    assert {r.label.split()[0].split("-")[1] for r in rows} == {f"h{h}" for h in HEADS}
    _check(rows)


def _isolated_and_huge(g: Graph, scale: float) -> Graph:
    """Nodes 0..29 lose every edge (isolated); features scaled so attention logits reach ~1e4."""
    keep = (g.src >= 30) & (g.dst >= 30)
    return Graph(g.name + "-isolated-huge", g.num_nodes, g.src[keep], g.dst[keep],
                 (g.features * scale).astype(np.float32), g.labels, g.train_mask, g.val_mask, g.test_mask,
                 g.num_classes)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("self_loops", [True, False])
def test_gat_isolated_nodes_and_huge_logits(graph, self_loops):
    """Logits up to ~800 (exp overflows even fp64 without the running max).

    The softmax saturates, so the attention-vector gradients are tiny differences of large terms:
    ill-conditioned for any implementation. Outputs and loss are held to the usual tolerance; gradients to
    max(tol, 10x the reference's own rounding sensitivity: fp32 PyG against fp64 PyG; in fp64, how far
    PyG's gradients move when every weight moves by one unit in the last place).
    """
    g = _isolated_and_huge(graph, 120.0)
    kw = dict(self_loops=self_loops, batchnorm=False, dropout=0.0, layers=2, hidden=8)
    rows = verify(g, 3, _variants(**kw), timeout_s=120, progress=lambda m: None, conditioning=True)
    _check(rows)
    assert all(r.output_err <= r.tol and r.loss_err <= r.tol for r in rows), format_table(rows)


def test_logits_really_are_huge(graph):
    """The fixture above does reach logits that would overflow exp() without the running max."""
    g = _isolated_and_huge(graph, 120.0)
    torch.manual_seed(7)
    conv = GATConv(g.feature_dim, 4, heads=2)
    z = conv.lin(torch.from_numpy(g.features)).view(g.num_nodes, 2, 4)
    logits = (z * conv.att_src).sum(-1)[g.src] + (z * conv.att_dst).sum(-1)[g.dst]
    assert float(logits.abs().max()) > 710  # exp(710) overflows even float64 (max ~1.8e308 = e^709.8)


def test_unfused_sar_chunks_equal_one_pass(graph, monkeypatch):
    """The unfused per-shard path processes edges in chunks; the result must not depend on the chunking."""
    sg = ShardedGraph.single(graph.src, graph.dst, graph.num_nodes, EngineConfig(fused=False))
    agg = gat_module.AttentionAggregation(4, 3, 0.2, True, False, None)
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(graph.num_nodes, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    dst = torch.cat([rows, torch.randn(graph.num_nodes, 4, dtype=torch.float64, generator=gen)], 1)
    weight = torch.randn(graph.num_nodes, 4, 3, dtype=torch.float64, generator=gen)
    results = []
    for chunk in (1 << 20, 7):
        monkeypatch.setattr(gat_module, "UNFUSED_CHUNK_EDGES", chunk)
        out = ShardAggregate.apply(sg, agg, sg.local_shard, rows, dst)
        results.append((out.detach(), torch.autograd.grad((out * weight).sum(), rows)[0]))
    assert len(torch_backend.row_chunks(sg.local_shard.rowptr, 7)) > 100
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kernels_backend", ["cpp", "torch"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("self_loops", [True, False])
def test_gatconv_layer_matches_pyg_on_one_process(graph, kernels_backend, fused, self_loops):
    """One ``sarlab.nn.GATConv`` (the layer ``sarlab bench kernels`` times) against PyG's with the same weights,
    fp64: outputs and the gradients of the input and every parameter (random bias, isolated nodes included)."""
    keep = (graph.src >= 10) & (graph.src != graph.dst)  # nodes 0..9 send nothing; PyG drops self-edges itself
    src, dst = graph.src[keep], graph.dst[keep]
    torch.manual_seed(4)
    ours = GATConv(graph.feature_dim, 3, heads=4, add_self_loops=self_loops).double()
    theirs = PyGGATConv(graph.feature_dim, 3, heads=4, add_self_loops=self_loops).double()
    with torch.no_grad():
        ours.bias.normal_()
        for name, pyg_name in ours.pyg_parameter_map().items():
            target = dict(theirs.named_parameters())[pyg_name]
            target.copy_(dict(ours.named_parameters())[name].view_as(target))
    sharded = ShardedGraph.single(src, dst, graph.num_nodes, EngineConfig(fused=fused, kernels=kernels_backend))
    x = torch.from_numpy(graph.features).double().requires_grad_(True)
    out = ours(sharded, x)
    want = theirs(x, torch.as_tensor(np.stack([src, dst])))
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    upstream = torch.randn_like(out)
    names = list(ours.pyg_parameter_map().items())
    got = torch.autograd.grad((out * upstream).sum(), [x] + [dict(ours.named_parameters())[a] for a, _ in names])
    expected = torch.autograd.grad((want * upstream).sum(),
                                   [x] + [dict(theirs.named_parameters())[b] for _, b in names])
    for (name, _), a, b in zip([("x", "x")] + names, got, expected):
        torch.testing.assert_close(a, b.view_as(a), rtol=1e-10, atol=1e-10, msg=name)


# ---------------------------------------------------------------------------------------------- fused shard kernels
# The C++ kernels alone against a dense masked softmax written here, over every path they take: one pass or tiles
# of gathered rows ($SARLAB_GAT_TILE_BYTES: "0" never tiles, "1" puts every row in its own tile), rows whose indices
# ascend or not (unsorted ones run in one tile), head counts, slopes, rows without in- or out-edges, strided z rows,
# 1-3 threads, and shards merged through the running state.
KERNEL_TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=2e-5, atol=2e-5)}


def _adjacency(num_dst: int, num_src: int, p: float, seed: int) -> torch.Tensor:
    """Boolean [Nd,Ns] adjacency (edge j -> i at [i, j]); destinations 0-2 get no edge, the last source sends none."""
    adj = torch.rand(num_dst, num_src, generator=torch.Generator().manual_seed(seed)) < p
    adj[:3] = False
    adj[:, -1] = False
    return adj


def _csr(adj: torch.Tensor, shuffle_seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of ``adj``, sources ascending in each row (or shuffled within rows with ``shuffle_seed``)."""
    rows, cols = adj.nonzero(as_tuple=True)
    if shuffle_seed is not None:
        key = torch.rand(rows.numel(), generator=torch.Generator().manual_seed(shuffle_seed))
        order = torch.argsort(rows.double() * 2 + key)  # rows keep their order, sources inside them are shuffled
        rows, cols = rows[order], cols[order]
    rowptr = torch.zeros(adj.shape[0] + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(adj.sum(1), 0)
    return rowptr, cols.to(torch.int64)


def _inputs(adj: torch.Tensor, heads: int, channels: int, dtype: torch.dtype, seed: int, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    num_dst, num_src = adj.shape
    s_dst = (torch.randn(num_dst, heads, generator=gen, dtype=dtype) * scale).requires_grad_(True)
    s_src = (torch.randn(num_src, heads, generator=gen, dtype=dtype) * scale).requires_grad_(True)
    z = torch.randn(num_src, heads, channels, generator=gen, dtype=dtype).requires_grad_(True)
    upstream = torch.randn(num_dst, heads, channels, generator=gen, dtype=dtype)
    return s_dst, s_src, z, upstream


def _dense_reference(adj, s_dst, s_src, z, slope, upstream):
    """out_i = sum_j softmax_j(leaky(s_dst_i + s_src_j)) z_j over in-edges (0 without any), dense [Nd,Ns,H], and
    the gradients of (out * upstream).sum() wrt s_dst, s_src, z by autograd (all in float64)."""
    inputs = [t.detach().double().requires_grad_(True) for t in (s_dst, s_src, z)]
    logits = torch.nn.functional.leaky_relu(inputs[0][:, None] + inputs[1][None], slope)
    has_edge = adj.any(1)[:, None, None]
    logits = torch.where(adj[..., None], logits, torch.full_like(logits, float("-inf")))
    logits = torch.where(has_edge, logits, torch.zeros_like(logits))
    alpha = torch.softmax(logits, dim=1) * has_edge
    out = torch.einsum("ijh,jhc->ihc", alpha, inputs[2])
    return (out.detach(), *torch.autograd.grad((out * upstream.double()).sum(), inputs))


def _fused_kernels(rowptr, col, s_dst, s_src, z, slope, upstream, transpose=None, state=None):
    """Forward (from ``state`` when given), finalize and backward of the C++ kernels: (out, d s_dst, d s_src, d z)."""
    s_dst, s_src = s_dst.detach(), s_src.detach()
    m, l, acc = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z.detach(), slope, state=state, backend="cpp")
    out = kernels.gat_finalize(m, l, acc)
    delta = (upstream * out).sum(-1)
    grads = kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z.detach(), slope, m, l, upstream, delta,
                                       backend="cpp", transpose=transpose)
    return (out, *grads)


def _assert_matches(got, want, dtype):
    for name, a, b in zip(("out", "grad_s_dst", "grad_s_src", "grad_z"), got, want, strict=True):
        torch.testing.assert_close(a.double(), b, **KERNEL_TOL[dtype], msg=name)


@pytest.mark.parametrize("tile_bytes", ["0", "1", "700"])
@pytest.mark.parametrize("heads", [1, 2, 3, 8])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_kernels_match_dense_reference(monkeypatch, tile_bytes, heads, dtype):
    monkeypatch.setenv("SARLAB_GAT_TILE_BYTES", tile_bytes)
    adj = _adjacency(37, 41, 0.3, seed=heads)
    rowptr, col = _csr(adj)
    s_dst, s_src, z, upstream = _inputs(adj, heads, 5, dtype, seed=10 + heads)
    got = _fused_kernels(rowptr, col, s_dst, s_src, z, 0.2, upstream)
    want = _dense_reference(adj, s_dst, s_src, z, 0.2, upstream)
    _assert_matches(got, want, dtype)
    assert torch.equal(got[0][:3], torch.zeros_like(got[0][:3])) and torch.equal(got[3][-1], torch.zeros_like(z[-1]))


@pytest.mark.parametrize("slope", [0.0, 0.01, 0.5, 1.0])
def test_fused_kernels_negative_slopes(monkeypatch, slope):
    monkeypatch.setenv("SARLAB_GAT_TILE_BYTES", "1")
    adj = _adjacency(30, 25, 0.4, seed=3)
    rowptr, col = _csr(adj)
    s_dst, s_src, z, upstream = _inputs(adj, 4, 3, torch.float64, seed=4)
    _assert_matches(_fused_kernels(rowptr, col, s_dst, s_src, z, slope, upstream),
                    _dense_reference(adj, s_dst, s_src, z, slope, upstream), torch.float64)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_kernels_wide_logit_range(dtype):
    """Logits spread over thousands: exp(e - max) runs from 1 down through float underflow (-87 / -708)."""
    adj = _adjacency(40, 50, 0.5, seed=5)
    rowptr, col = _csr(adj)
    s_dst, s_src, z, upstream = _inputs(adj, 2, 4, dtype, seed=6, scale=400.0)
    got = _fused_kernels(rowptr, col, s_dst, s_src, z, 0.2, upstream)
    want = _dense_reference(adj, s_dst, s_src, z, 0.2, upstream)
    # fp32 rounds logits ~1e3 to ~1e-4 absolute, which moves the softmax weights by as much
    tol = KERNEL_TOL[dtype] if dtype == torch.float64 else dict(rtol=1e-3, atol=1e-3)
    for name, a, b in zip(("out", "grad_s_dst", "grad_s_src", "grad_z"), got, want, strict=True):
        torch.testing.assert_close(a.double(), b, **tol, msg=name)


def test_fused_kernels_unsorted_rows_fall_back_to_one_pass(monkeypatch):
    """Sources shuffled within rows and destinations shuffled within the transpose's rows: still exact."""
    monkeypatch.setenv("SARLAB_GAT_TILE_BYTES", "1")
    adj = _adjacency(33, 29, 0.35, seed=7)
    rowptr, col = _csr(adj, shuffle_seed=1)
    t_rowptr, t_row = _csr(adj.T.contiguous(), shuffle_seed=2)
    assert not torch.equal(col, _csr(adj)[1]) and not torch.equal(t_row, _csr(adj.T.contiguous())[1])
    s_dst, s_src, z, upstream = _inputs(adj, 3, 4, torch.float64, seed=8)
    got = _fused_kernels(rowptr, col, s_dst, s_src, z, 0.2, upstream, transpose=(t_rowptr, t_row))
    _assert_matches(got, _dense_reference(adj, s_dst, s_src, z, 0.2, upstream), torch.float64)


def test_fused_kernels_same_bits_for_tiles_and_threads(monkeypatch):
    """Sums run in CSR/CSC order in fixed parts: tiling and 1, 2 or 3 threads give identical results."""
    adj = _adjacency(300, 280, 0.05, seed=9)
    rowptr, col = _csr(adj)
    s_dst, s_src, z, upstream = _inputs(adj, 4, 6, torch.float32, seed=10)
    threads = torch.get_num_threads()
    runs = {}
    try:
        for tile_bytes in ("0", "4096"):
            for nthreads in (1, 2, 3):
                monkeypatch.setenv("SARLAB_GAT_TILE_BYTES", tile_bytes)
                torch.set_num_threads(nthreads)
                runs[tile_bytes, nthreads] = _fused_kernels(rowptr, col, s_dst, s_src, z, 0.2, upstream)
    finally:
        torch.set_num_threads(threads)
    first = runs["0", 1]
    for key, run in runs.items():
        for a, b in zip(first, run, strict=True):
            assert torch.equal(a, b), key
    _assert_matches(first, _dense_reference(adj, s_dst, s_src, z, 0.2, upstream), torch.float32)


def test_fused_kernels_read_strided_z_rows_in_place():
    """z as the column slice of wider [z | s] rows (the engine's layout) gives exactly the contiguous results."""
    adj = _adjacency(20, 24, 0.4, seed=11)
    rowptr, col = _csr(adj)
    s_dst, s_src, z, upstream = _inputs(adj, 2, 5, torch.float64, seed=12)
    wide = torch.cat([z.detach().reshape(24, -1), s_src.detach()], 1)
    strided = wide[:, :10].view(24, 2, 5)
    assert not strided.is_contiguous() and kernels.gat._row_blocks(strided) is strided
    for a, b in zip(_fused_kernels(rowptr, col, s_dst, s_src, strided, 0.2, upstream),
                    _fused_kernels(rowptr, col, s_dst, s_src, z, 0.2, upstream), strict=True):
        assert torch.equal(a, b)


def test_fused_kernels_merge_shards_through_the_state(monkeypatch):
    """Two shards (sources split in two ranges), each tiled: the forward state carries the max across them and
    the per-shard gradients add up to the whole graph's."""
    monkeypatch.setenv("SARLAB_GAT_TILE_BYTES", "1")
    adj = _adjacency(26, 30, 0.4, seed=13)
    s_dst, s_src, z, upstream = _inputs(adj, 3, 4, torch.float64, seed=14, scale=3.0)
    halves = (slice(0, 13), slice(13, 30))
    csrs = [_csr(adj[:, part]) for part in halves]
    state = None
    for (rowptr, col), part in zip(csrs, halves, strict=True):
        state = kernels.gat_forward_shard(rowptr, col, s_dst.detach(), s_src[part].detach(), z[part].detach(), 0.2,
                                          state=state, backend="cpp")
    m, l, acc = state
    out = kernels.gat_finalize(m, l, acc)
    delta = (upstream * out).sum(-1)
    g_dst, g_src, g_z = torch.zeros_like(s_dst), torch.zeros_like(s_src), torch.zeros_like(z)
    for (rowptr, col), part in zip(csrs, halves, strict=True):
        d, s, gz = kernels.gat_backward_shard(rowptr, col, s_dst.detach(), s_src[part].detach(), z[part].detach(),
                                              0.2, m, l, upstream, delta, backend="cpp")
        g_dst, g_src[part], g_z[part] = g_dst + d, s, gz
    _assert_matches((out, g_dst, g_src, g_z), _dense_reference(adj, s_dst, s_src, z, 0.2, upstream), torch.float64)


# ---------------------------------------------------------------------------------------------- unfused torch kernels
# The torch kernels the unfused ``sar`` path streams (chunks of edges; weighted sums as block-diagonal sparse
# products, the backward's source side over the transpose) against the same dense reference.
def _unfused_kernels(rowptr, col, s_dst, s_src, z, slope, upstream, max_edges, state=None, transpose=None,
                     out=None):
    """Forward (into ``state`` when given), finalize and backward of the torch kernels: (out, d s_dst, d s_src, d z)."""
    s_dst, s_src, z = s_dst.detach(), s_src.detach(), z.detach()
    m, l, acc = state if state is not None else kernels.empty_state(rowptr.numel() - 1, z.shape[1], z.shape[2], z)
    torch_backend.gat_forward_shard(rowptr, col, s_dst, s_src, z, slope, m, l, acc, max_edges=max_edges)
    result = kernels.gat_finalize(m, l, acc)
    delta = (upstream * result).sum(-1)
    grads = torch_backend.gat_backward_shard(rowptr, col, s_dst, s_src, z, slope, m, l, upstream, delta, out=out,
                                             max_edges=max_edges, transpose=transpose)
    return (result, *grads)


@pytest.mark.parametrize("max_edges", [None, 1, 7, 50])
@pytest.mark.parametrize("heads", [1, 2, 8])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_unfused_kernels_match_dense_reference(max_edges, heads, dtype):
    """Destinations 0-2 without in-edges, a source without out-edges, rows longer than a chunk (7), one row per
    chunk (1), several rows per chunk (50), one chunk (None)."""
    adj = _adjacency(37, 41, 0.3, seed=heads)
    rowptr, col = _csr(adj)
    if max_edges is not None:
        assert len(torch_backend.row_chunks(rowptr, max_edges)) > 1
        long_rows_alone = any(end - first == 1 and int(rowptr[end] - rowptr[first]) > max_edges
                              for first, end in torch_backend.row_chunks(rowptr, max_edges))
        assert long_rows_alone == (max_edges < int(rowptr.diff().max()))
    s_dst, s_src, z, upstream = _inputs(adj, heads, 5, dtype, seed=20 + heads)
    got = _unfused_kernels(rowptr, col, s_dst, s_src, z, 0.2, upstream, max_edges)
    _assert_matches(got, _dense_reference(adj, s_dst, s_src, z, 0.2, upstream), dtype)
    assert torch.equal(got[0][:3], torch.zeros_like(got[0][:3])) and torch.equal(got[3][-1], torch.zeros_like(z[-1]))


@pytest.mark.parametrize("slope", [0.0, 0.01, 0.5, 1.0])
def test_unfused_kernels_negative_slopes(slope):
    adj = _adjacency(30, 25, 0.4, seed=3)
    rowptr, col = _csr(adj)
    s_dst, s_src, z, upstream = _inputs(adj, 4, 3, torch.float64, seed=4)
    _assert_matches(_unfused_kernels(rowptr, col, s_dst, s_src, z, slope, upstream, max_edges=5),
                    _dense_reference(adj, s_dst, s_src, z, slope, upstream), torch.float64)


def test_unfused_kernels_wide_logit_range():
    """Logits spread over thousands (exp(e - max) underflows for most edges), in chunks, fp64."""
    adj = _adjacency(40, 50, 0.5, seed=5)
    rowptr, col = _csr(adj)
    s_dst, s_src, z, upstream = _inputs(adj, 2, 4, torch.float64, seed=6, scale=400.0)
    _assert_matches(_unfused_kernels(rowptr, col, s_dst, s_src, z, 0.2, upstream, max_edges=30),
                    _dense_reference(adj, s_dst, s_src, z, 0.2, upstream), torch.float64)


def test_unfused_kernels_engine_layout_and_shards():
    """As the engine calls them: z and s_src as column slices of ``[z | s_src]`` rows, gradients added into column
    slices of one zeroed row-gradient tensor and a slice of the destination gradient, a precomputed transpose, and
    two shards (sources split in two ranges) merged through the state: the per-shard gradients add up to the
    whole graph's."""
    heads, channels = 3, 4
    adj = _adjacency(26, 30, 0.4, seed=13)
    s_dst, s_src, z, upstream = _inputs(adj, heads, channels, torch.float64, seed=14, scale=3.0)
    hc = heads * channels
    rows = torch.cat([z.detach().reshape(30, hc), s_src.detach()], 1)
    dst_grad = torch.zeros(26, hc + 2 * heads, dtype=torch.float64)
    halves = (slice(0, 13), slice(13, 30))
    csrs = [_csr(adj[:, part]) for part in halves]
    state = kernels.empty_state(26, heads, channels, z)
    for (rowptr, col), part in zip(csrs, halves, strict=True):
        part_rows = rows[part]
        torch_backend.gat_forward_shard(rowptr, col, s_dst.detach(), part_rows[:, hc:],
                                        part_rows[:, :hc].view(-1, heads, channels), 0.2, *state, max_edges=9)
    m, l, acc = state
    out = kernels.gat_finalize(m, l, acc)
    delta = (upstream * out).sum(-1)
    row_grads = torch.zeros_like(rows)
    for (rowptr, col), part in zip(csrs, halves, strict=True):
        part_rows, part_grads = rows[part], row_grads[part]
        num_src = part_rows.shape[0]
        grads = torch_backend.gat_backward_shard(
            rowptr, col, s_dst.detach(), part_rows[:, hc:], part_rows[:, :hc].view(-1, heads, channels), 0.2, m, l,
            upstream, delta,
            out=(dst_grad[:, -heads:], part_grads[:, hc:], part_grads[:, :hc].view(-1, heads, channels)),
            max_edges=9, row=torch_backend.csr_rows(rowptr), transpose=kernels.csr_transpose(rowptr, col, num_src))
        assert grads[0].data_ptr() == dst_grad[:, -heads:].data_ptr()
    assert torch.equal(dst_grad[:, :-heads], torch.zeros_like(dst_grad[:, :-heads]))
    got = (out, dst_grad[:, -heads:], row_grads[:, hc:], row_grads[:, :hc].view(-1, heads, channels))
    _assert_matches(got, _dense_reference(adj, s_dst, s_src, z, 0.2, upstream), torch.float64)
