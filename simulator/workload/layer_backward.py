"""What a layer's backward computes, in the units the cost model prices: the tail (dropout, ReLU, BatchNorm),
``post``, the aggregation's set-up, self term and per-shard work, and ``pre``, in the reverse order of the forward
(:class:`~sarlab.simulator.workload.layers.LayerPlan` holds the forward and the layer's shape; notation as there).
"""
from __future__ import annotations

from dataclasses import replace

from sarlab.simulator.workload import rgcn_layer
from sarlab.simulator.workload.ops import FP64, ZERO_FILL_PASSES, Number, Op, active_rows

#: GAT ``pre`` backward, passes of ``n H C``: four products with ``g`` broadcast from ``[n, H, 1]`` at 2.5 (measured
#: 2.6-2.7 at H = 4, C = 24, 1.7 at H = 1, C = 16: the broadcast, not the bytes, bounds them) ``10``; ``a``'s two row
#: sums ``0.5``; the two adds of ``z``'s three gradients ``3 + 3``
GAT_PRE_BWD_HC = 16.5


class LayerBackward:
    """The backward ops of a :class:`~sarlab.simulator.workload.layers.LayerPlan` (its base class: the fields and
    the forward helpers are the plan's)."""

    def tail_bwd(self, n: Number) -> tuple[list[Op], list[Op]]:
        """Tail backward split at BatchNorm's all-reduce: (dropout, ReLU, BN sums), (BN input gradient)."""
        b, f = self.bytes_per_element, self.out_dim
        if not self.hidden:
            return [], []
        first = [Op("elementwise", 3.0 * b * n * f, backward=True)]
        if self.dropout > 0:
            first.append(Op("elementwise", 5.0 * b * n * f, calls=2, backward=True))
        second: list[Op] = []
        if self.batchnorm:
            first.append(Op("elementwise", (5 * b + 2 * FP64) * n * f, calls=3, backward=True))
            second = [Op("elementwise", 11.0 * b * n * f, calls=4, backward=True)]
        return first, second

    def post_bwd(self, n: Number) -> list[Op]:
        """Backward of ``post``: gradient w.r.t. the aggregation output and the dense parameters."""
        b = self.bytes_per_element
        if self.kind == "gcn":
            return [Op("elementwise", 3.0 * n * self.out_dim * b, calls=2, backward=True)]
        if self.kind == "sage":
            # dW_l, dW_r always; d(agg) = g W_l^T when the aggregation records; dx = g W_r^T when needed
            gemms = 2 + int(self.records) + int(self.needs_input_grad)
            return [
                Op("gemm", gemms * 2.0 * n * self.in_dim * self.out_dim, calls=gemms),
                Op("elementwise", 1.0 * n * self.out_dim * b),
            ]
        if self.kind == "rgcn":  # dW_root, dx = g W_root^T when needed, bias gradient
            grads = 1 + int(self.needs_input_grad)
            return [
                Op("gemm", grads * 2.0 * n * self.in_dim * self.out_dim, calls=grads),
                Op("elementwise", 1.0 * n * self.out_dim * b, backward=True),
            ]
        return [Op("elementwise", 1.0 * n * self.out_dim * b, backward=True)]

    def agg_bwd_setup(self, n: Number) -> list[Op]:
        """Start of the ring modes' aggregation backward (``SequentialAggregate.backward``): zeroed source gradient,
        mean scaling; GAT also zero-fills the destination-input gradient ``n x (w + H)`` (``grad_dst``).

        GAT's ``delta = sum_c g * out`` is computed in every ``shard_vjp`` call, which
        :mod:`sarlab.real.calibration.gatbench` times, so it is in the family's backward rate. GAT under autograd
        (``sa``) runs one ``autograd.grad`` over the kept graph instead, which allocates its gradients itself (also
        timed by gatbench): nothing here.
        """
        b, w = self.bytes_per_element, self.width
        if self.kind == "rgcn":  # the zero-filled source gradient the local shard adds into
            return [Op("elementwise", ZERO_FILL_PASSES * n * w * b)]
        if self.kind == "gat" and self.autograd:
            return []
        ops = [Op("elementwise", 1.0 * n * w * b)]
        if self.kind == "sage" and self.case == 1:
            ops.append(Op("elementwise", 2.0 * n * w * b))
        if self.kind == "gat":
            ops.append(Op("elementwise", ZERO_FILL_PASSES * n * (w + self.heads) * b))
        return ops

    def self_bwd(self, n: Number) -> list[Op]:
        """Backward of GAT's self-loop terms, once per layer, right after the local shard's VJP (both ring modes) or the
        one shard's (oneshot, one worker): ``AttentionAggregation.self_vjp`` and ``grad_dst +=`` its result
        (``_self_vjp`` in ``sarlab/core/aggregate.py``).

        .. math::
            p = s_{dst} + s_{src},\\quad \\alpha = e^{\\mathrm{leaky}(p) - m} / l,\\quad
            d_e = \\alpha \\left(\\textstyle\\sum_c g z - \\sum_c g\\, out\\right) \\mathrm{leaky}'(p),\\quad
            g_z = \\alpha g

        Bytes per element of the ``n`` rows (reads + writes), ``[n, H]`` ops: ``p`` 3, leaky 2, ``- m`` 3, exp 2,
        ``where(l > 0, l, 1)`` (compare ``b + 1``, ones ``b``, select ``3 b + 1``), the division 3, the outputs of
        the two sums 1 each, ``- delta`` 3, ``alpha *`` 3, ``where(p > 0, 1, slope)`` (compare ``b + 1``, two
        fills ``b`` each, select ``3 b + 1``), ``* leaky'`` 3, ``alpha`` read by ``g_z`` 1, the two ``d_e`` copied
        into the concatenation 4, their share of ``grad_dst +=`` 6: ``(46 b + 4) H``; ``[n, H, C]`` passes:
        ``g * out`` 3 and its sum's read 1, ``g * z`` 3 and 1, ``g_z`` 2, its copy into the concatenation 2, its
        share of ``grad_dst +=`` 3: ``15 H C b``; 22 calls.

        Unfused GAT under autograd runs no ``self_vjp``: the backward of ``init``'s graph instead (gatbench's
        timed graph starts from an empty state, so none of it is in the family's rate): the gradient of the
        first shard's ``acc * scale`` ``2 H C + H`` and ``l * scale`` ``3 H``; ``w z``'s ``g * z`` ``3 H C`` with
        its sum ``H C + H`` and ``g * w`` ``2 H C + H``; the two gradients of ``w`` added ``3 H``; exp's and leaky
        ReLU's backward ``3 H`` each; three slices of the destination rows (``z``, ``s_src``, ``s_dst``), each a
        zero-filled ``n (H C + 2 H)`` (:data:`sarlab.simulator.workload.ops.ZERO_FILL_PASSES`) with the slice copied in
        (``2 H C``, ``2 H``, ``2 H``) and added into the rows' gradient (``3 (H C + 2 H)``), all times ``b``;
        17 calls.
        """
        if self.kind != "gat" or not self.self_loops:
            return []
        b, hc, heads = self.bytes_per_element, self.heads * self.channels, self.heads
        if self.autograd:
            slices = 3.0 * (ZERO_FILL_PASSES + 3.0) * (hc + 2.0 * heads) + 2.0 * hc + 4.0 * heads
            per_row = (2.0 * hc + heads) + 3.0 * heads + (4.0 * hc + heads) + (2.0 * hc + heads) + 9.0 * heads + slices
            return [Op("elementwise", n * per_row * b, calls=17, backward=True)]
        return [Op("elementwise", n * (15.0 * hc * b + (46.0 * b + 4.0) * heads), calls=22, backward=True)]

    def shard_bwd(self, edges: Number, n: Number, num_src: Number, in_place: bool = False) -> list[Op]:
        """Backward of one shard: ``A_q^T g`` (case 1, output ``num_src`` rows), else the VJP.

        ``A^T g`` is added in place into the source gradient for the ring modes' local shard
        (``in_place``: like the forward, only the rows with an edge are touched) and is a fresh
        ``num_src x w`` result otherwise (a send buffer, or oneshot's gradient of its extended rows).
        A VJP that rematerializes (SAGE max/pool's regathered messages, the GAT kernels' recomputed
        attention) does so inside the backward op the calibration times, so its backward ratio covers it.
        GAT: :mod:`sarlab.real.calibration.gatbench` times the whole ``AttentionAggregation.shard_vjp``, so the
        family's backward holds its zeroed gradients, ``delta``, the input copies, the unfused chunks' adds and the
        fused form's ``torch.cat``: one op.
        """
        if self.kind == "rgcn":
            return rgcn_layer.shard_bwd(self.relation_split(edges, n, num_src), *self.rgcn_args())
        if self.case == 1:  # A^T g gathers rows of the n x w output gradient
            b = self.bytes_per_element
            gathered = n * self.width * b
            fresh = 0.0 if in_place else num_src * self.width * b
            rows = active_rows(edges, num_src) * self.width
            return [Op("spmm", edges * self.width, rows=rows, backward=True, gather_bytes=gathered, fresh=fresh,
                       edges=edges * self.visits_per_edge)]
        fwd = self.shard_fwd(edges, n, num_src)[:1]
        return [replace(o, backward=True, rows=o.rows + num_src * self.width) for o in fwd]

    def pre_bwd(self, n: Number) -> list[Op]:
        """Backward of ``pre``: weight gradient, and the input gradient when needed.

        GAT: autograd's backward of :meth:`pre_fwd`'s ops: the concatenations' and sums' backward are views; the two
        products ``z * a`` give four broadcast products (``g a`` and ``g z``), ``a``'s gradients two sums over the
        rows, and ``z``'s three gradients two adds: 8 elementwise calls of :data:`GAT_PRE_BWD_HC` passes of
        ``n H C``, then ``dW`` (and ``dx``).
        """
        b = self.bytes_per_element
        grads = 2 if self.needs_input_grad else 1
        if self.kind == "rgcn":  # dx = root's + the aggregation's
            return [Op("elementwise", 3.0 * n * self.in_dim * b)] if self.needs_input_grad else []
        if self.kind == "gcn":
            return [
                Op("elementwise", 5.0 * n * self.out_dim * b, calls=2, backward=True),
                Op("gemm", grads * 2.0 * n * self.in_dim * self.out_dim, calls=grads),
            ]
        if self.kind == "sage":
            ops = []
            if self.aggr == "pool":
                ops = [
                    Op("elementwise", 3.0 * n * self.in_dim * b, backward=True),
                    Op("gemm", grads * 2.0 * n * self.in_dim * self.in_dim, calls=grads),
                ]
            if self.needs_input_grad:  # the two contributions to dx
                ops.append(Op("elementwise", 3.0 * n * self.in_dim * b))
            return ops
        hc = self.heads * self.channels
        return [
            Op("elementwise", GAT_PRE_BWD_HC * n * hc * b, calls=8, backward=True),
            Op("gemm", grads * 2.0 * n * self.in_dim * hc, calls=grads),
        ]
