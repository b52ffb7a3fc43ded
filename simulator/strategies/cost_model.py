"""What a training run costs on a resource (CPU servers, GPU servers, serverless threads), prices as inputs.

A :class:`Resource` is one worker's machine: its cores, memory, network and price. :func:`resource_profile`
turns the calibrated machine profile into that machine's (cores, link bandwidth, and a compute speed relative
to the profile's cores), so the simulator prices the same epoch there; :func:`run_cost` bills it:

.. math::
    \\mathrm{cost} = N \\Big(\\frac{p_h}{3600} \\big\\lceil \\max(T, T_{min}) / \\delta \\big\\rceil \\delta
    + r\\, p_{req}\\Big), \\qquad \\mathrm{value} = \\frac{1}{T \\cdot \\mathrm{cost}}

for ``N`` workers over a run of ``T`` seconds, an hourly price ``p_h`` billed in increments ``delta`` with a
minimum ``T_min``, and ``r`` requests per worker at ``p_req`` each (serverless only). Value is Dorylus's
(OSDI'21) figure of merit.

Default prices (:data:`DEFAULT_RESOURCES`; every field can be overridden from a JSON file, :func:`load_resources`):

========== ============================================ ========= ======= ========== ==============================
name       machine                                      vCPU/GPU  memory  network    price
========== ============================================ ========= ======= ========== ==============================
cpu        AWS c5.4xlarge (on-demand, us-east-1, Linux) 16 vCPU   32 GiB  10 Gbit/s  $0.68 per hour
gpu        AWS p3.2xlarge (on-demand, us-east-1, Linux) 1 V100    16 GiB* 10 Gbit/s  $3.06 per hour
serverless Dorylus's Lambda thread                      0.11 vCPU 192 MB  200 Mbit/s $0.01125 per hour + $0.20/1M req
========== ============================================ ========= ======= ========== ==============================

Sources, quoted 2026-11-23: the EC2 prices are AWS's published on-demand list prices for us-east-1 Linux
(aws.amazon.com/ec2/pricing/on-demand; c5.4xlarge $0.68/h and p3.2xlarge $3.06/h have been the list prices since
those types launched; they were not fetched today, so check them before relying on a cost), EC2 bills per
second with a 60 s minimum. The serverless figures are Dorylus's (Thorpe et al., OSDI'21, as issue 18 quotes
them): 0.11 vCPU, 192 MB, ~200 Mbit/s per thread, $0.20 per million requests plus $0.01125 per hour of compute
(AWS Lambda's $0.0000166667 per GB-second at 0.1875 GB), billed per 100 ms. (*) the GPU's own memory bounds
a worker. **Assumed, not measured**: ``speed`` (compute per worker relative to one thread of the calibrated
profile, before the profile's own thread scaling): 1 for EC2 vCPUs, 0.11 for a Lambda thread, and 25 for a V100
running the sparse and dense ops of a GNN layer (a rough ratio of a V100 to one server core on GNN training
epochs; no GPU was measured here). A serverless worker here runs its whole share of the epoch (graph and
tensor work) on its thread; Dorylus's split into graph servers and Lambdas is not modelled.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from sarlab.simulator.hardware.profile import Link, Profile

GIB = 1 << 30
KINDS = ("cpu", "gpu", "serverless")


@dataclass(frozen=True)
class Resource:
    """One worker's machine and its price.

    Args:
        name: short name (``cpu``, ``gpu``, ``serverless``...).
        kind: :data:`KINDS`.
        cores: threads a worker computes with (GPU: 1 stream).
        speed: compute speed per thread relative to one thread of the profile (assumed, see module docstring).
        memory_gib: memory a worker may use.
        network_gbps: link bandwidth of a worker, Gbit/s.
        price_per_hour: dollars per hour of one worker.
        price_per_request: dollars per request (serverless invocations).
        requests_per_epoch_layer: invocations per worker, epoch and layer (forward + backward: 2).
        billing_increment_s: billing granularity.
        minimum_s: minimum billed duration per worker.
        source: where the figures come from.
    """

    name: str
    kind: str
    cores: int
    speed: float
    memory_gib: float
    network_gbps: float
    price_per_hour: float
    price_per_request: float = 0.0
    requests_per_epoch_layer: float = 0.0
    billing_increment_s: float = 1.0
    minimum_s: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"resource {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.cores < 1 or self.speed <= 0 or self.memory_gib <= 0 or self.network_gbps <= 0:
            raise ValueError(f"resource {self.name!r}: cores >= 1, speed, memory_gib, network_gbps > 0")
        if self.price_per_hour < 0 or self.price_per_request < 0 or self.billing_increment_s <= 0:
            raise ValueError(f"resource {self.name!r}: prices >= 0 and billing_increment_s > 0")


DEFAULT_RESOURCES: dict[str, Resource] = {
    "cpu": Resource("cpu", "cpu", cores=16, speed=1.0, memory_gib=32.0, network_gbps=10.0, price_per_hour=0.68,
                    billing_increment_s=1.0, minimum_s=60.0,
                    source="AWS c5.4xlarge on-demand us-east-1 Linux list price, quoted 2026-11-23"),
    "gpu": Resource("gpu", "gpu", cores=1, speed=25.0, memory_gib=16.0, network_gbps=10.0, price_per_hour=3.06,
                    billing_increment_s=1.0, minimum_s=60.0,
                    source="AWS p3.2xlarge (1 V100 16 GB) on-demand us-east-1 Linux list price, quoted 2026-11-23; "
                           "speed 25 assumed"),
    "serverless": Resource("serverless", "serverless", cores=1, speed=0.11, memory_gib=0.1875, network_gbps=0.2,
                           price_per_hour=0.01125, price_per_request=0.20e-6, requests_per_epoch_layer=2.0,
                           billing_increment_s=0.1, minimum_s=0.0,
                           source="Dorylus (OSDI'21) Lambda thread: 0.11 vCPU, 192 MB, ~200 Mbit/s; $0.20 per 1M "
                                  "requests + $0.01125 per hour, billed per 100 ms"),
}


def load_resources(path: str | Path | None = None) -> dict[str, Resource]:
    """The default resources, with fields (or whole new resources) from a JSON file.

    The file maps names to objects of :class:`Resource` fields, e.g. ``{"cpu": {"price_per_hour": 0.61}}``; a new
    name needs every field without a default.
    """
    resources = dict(DEFAULT_RESOURCES)
    if path is None:
        return resources
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"prices file {path} does not exist") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"prices file {path} is not JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"prices file {path}: expected an object of resource name -> fields")
    known = {f.name for f in fields(Resource)}
    for name, values in data.items():
        if not isinstance(values, dict) or set(values) - known:
            raise ValueError(f"prices file {path}: {name!r} must be an object with fields among {sorted(known)}")
        try:
            if name in resources:
                resources[name] = replace(resources[name], **values)
            else:
                resources[name] = Resource(**{"name": name, **values})
        except TypeError as err:
            raise ValueError(f"prices file {path}: resource {name!r}: {err}") from None
    return resources


def resource_profile(profile: Profile, resource: Resource) -> Profile:
    """``profile`` as one worker per ``resource``: its cores, a link of its bandwidth (the profile's latency and
    per-message gap), compute scaled by ``1 / speed``, one worker per host."""
    link = Link(profile.inter_host.latency_s, resource.network_gbps * 1e9 / 8.0, profile.inter_host.gap_s)
    scale = 1.0 / resource.speed
    curve = tuple((nbytes, value * scale) for nbytes, value in profile.compute_scale_curve)
    return replace(profile, name=f"{profile.name}@{resource.name}", cores_per_host=resource.cores,
                   workers_per_host=1, inter_host=link, intra_host=link, compute_scale=profile.compute_scale * scale,
                   compute_scale_curve=curve, mem_per_host_bytes=int(resource.memory_gib * GIB))


def billed_seconds(resource: Resource, seconds: float) -> float:
    """Seconds billed for ``seconds`` of use: the minimum, rounded up to the billing increment."""
    step = resource.billing_increment_s
    return math.ceil(max(seconds, resource.minimum_s) / step - 1e-9) * step


def run_cost(resource: Resource, workers: int, epoch_s: float, epochs: int, layers: int) -> float:
    """Dollars of ``epochs`` epochs of ``epoch_s`` on ``workers`` workers (module docstring).

    Serverless threads are invoked ``requests_per_epoch_layer`` times per epoch and layer; each invocation is
    billed on its own, so an epoch's time is billed per invocation (``epoch_s`` split evenly over them)."""
    if workers < 1 or epochs < 1 or epoch_s < 0:
        raise ValueError("workers and epochs must be >= 1 and epoch_s >= 0")
    requests = resource.requests_per_epoch_layer * layers * epochs
    if resource.kind == "serverless" and requests > 0:
        per_call = epoch_s * epochs / requests
        billed = requests * billed_seconds(resource, per_call)
    else:
        billed = billed_seconds(resource, epoch_s * epochs)
    return workers * (resource.price_per_hour * billed / 3600.0 + requests * resource.price_per_request)


def value(time_s: float, cost: float) -> float:
    """Dorylus's value, :math:`1 / (T \\cdot \\mathrm{cost})` (0 where either is 0)."""
    return 0.0 if time_s <= 0 or cost <= 0 else 1.0 / (time_s * cost)


def resources_json(resources: dict[str, Resource]) -> dict:
    """Plain-JSON form of the resources (what a prices file may override)."""
    return {name: asdict(r) for name, r in resources.items()}
