"""The model configuration the simulator prices: :class:`ModelSpec`, and its labels (``gcn``, ``sage-max``...)."""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
MODELS = ("gcn", "sage", "gat", "rgcn")
SAGE_AGGRS = ("mean", "max", "pool")


@dataclass(frozen=True)
class ModelSpec:
    """A model configuration (the configuration columns of a metric record).

    Args:
        model: ``gcn``, ``sage``, ``gat`` or ``rgcn``.
        layers: number of conv layers ``L`` (>= 1).
        hidden: hidden width (GAT: the concatenated width, ``heads * hidden // heads``).
        heads: attention heads of GAT's hidden layers (the output layer has one head).
        aggr: SAGE aggregator: ``mean`` (case 1), ``max`` or ``pool`` (case 2).
        fused: GAT uses the fused attention kernels (no per-edge tensors); R-GCN aggregates first, then ``@ W_r``
            (PyG ``RGCNConv``'s order, the engine's default), else one message ``x_j W_r`` per edge.
        batchnorm: hidden layers apply distributed BatchNorm.
        dropout: dropout probability of hidden layers (0 disables the op).
        dtype: ``float32``/``float64``/``bfloat16``.
        relations: R-GCN: relations of the graph (one weight ``W_r`` per relation and layer, plus the root weight).
        self_loops: GAT: every node also attends to itself (the engine's default), which adds the self-loop terms'
            work to each layer (:meth:`sarlab.simulator.workload.layers.LayerPlan.self_init`,
            :meth:`~.LayerPlan.self_bwd`).
    """

    model: str = "gcn"
    layers: int = 2
    hidden: int = 64
    heads: int = 1
    aggr: str = "mean"
    fused: bool = False
    batchnorm: bool = True
    dropout: float = 0.5
    dtype: str = "float32"
    relations: int = 1
    self_loops: bool = True

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.layers < 1 or self.hidden < 1 or self.heads < 1 or self.relations < 1:
            raise ValueError("layers, hidden, heads and relations must be >= 1")
        if self.model == "sage" and self.aggr not in SAGE_AGGRS:
            raise ValueError(f"sage aggr must be one of {SAGE_AGGRS}, got {self.aggr!r}")
        if self.model == "gat" and self.hidden % self.heads:
            raise ValueError(f"GAT hidden size {self.hidden} must be divisible by heads {self.heads}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {tuple(DTYPE_BYTES)}, got {self.dtype!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def label(self) -> str:
        """Short name: ``gcn``, ``sage-max``, ``gat-fused``, ``rgcn`` (aggregate first), ``rgcn-per-edge``..."""
        if self.model == "sage":
            return f"sage-{self.aggr}"
        if self.model == "gat":
            return "gat-fused" if self.fused else "gat"
        if self.model == "rgcn":
            return "rgcn" if self.fused else "rgcn-per-edge"
        return self.model


def parse_model(label: str, base: ModelSpec) -> ModelSpec:
    """A :class:`ModelSpec` from a label (``gcn``, ``sage``, ``sage-max``, ``gat``, ``gat-fused``, ``rgcn``,
    ``rgcn-per-edge``...).

    Fields the label does not name come from ``base``.
    """
    name, _, variant = label.strip().lower().partition("-")
    fields = {
        k: getattr(base, k)
        for k in ("layers", "hidden", "heads", "aggr", "fused", "batchnorm", "dropout", "dtype", "relations",
                  "self_loops")
    }
    if name == "sage" and variant:
        fields["aggr"] = variant
    elif name == "gat" and variant:
        if variant not in ("fused", "unfused"):
            raise ValueError(f"unknown GAT variant {variant!r} in {label!r}: use gat-fused or gat-unfused")
        fields["fused"] = variant == "fused"
    elif name == "rgcn" and variant:
        if variant not in ("fused", "per-edge"):
            raise ValueError(f"unknown R-GCN variant {variant!r} in {label!r}: use rgcn (aggregate first, --unfused "
                             "for per-edge) or rgcn-per-edge")
        fields["fused"] = variant == "fused"
    elif variant:
        raise ValueError(f"model label {label!r}: only sage-<aggr>, gat-fused/gat-unfused and rgcn-per-edge take a "
                         "suffix")
    return ModelSpec(model=name, **fields)
