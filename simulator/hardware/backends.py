"""Per-backend communication overlays of a profile: what the links and message software cost over another
torch.distributed backend than gloo, and how evenly ranks joined by it progress on shared cores.

A profile's own link, message and progress-spread fields (:data:`OVERLAY_FIELDS`) are gloo's, what ``sarlab
calibrate`` measures by default. ``Profile.backends`` maps another backend's name to an overlay: some or all of
:data:`OVERLAY_FIELDS`, measured over that backend by the same benchmarks (``sarlab calibrate --backend NAME``:
:mod:`sarlab.real.calibration.netbench`, :mod:`sarlab.real.calibration.commbench` and
:mod:`sarlab.real.calibration.progressbench`), plus its provenance (``notes``: lines; ``meta``: date, command,
load). ``crowded_cpu`` (:data:`CROWDED_FIELDS`) holds the background CPU costs measured with the host running more
ranks than cores, where the executor runs a backend differently (oneCCL without its worker thread); the
profile prices them for such hosts (:meth:`~sarlab.simulator.hardware.profile.Profile.comm_cpu`). The progress
spread belongs here because it depends on how a rank waits at a barrier (gloo's threads sleep in
the kernel, oneCCL's worker polls), not only on the compute. :func:`for_backend` returns the profile with the
overlay's fields in place of its own and everything else (op costs, memory, placement) unchanged. In JSON an overlay
is an object under the profile's ``backends`` key, links as ``{latency_s, bandwidth_Bps, gap_s}`` objects, the
spread as ``{P: sigma}``; profiles without the key load as gloo-only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sarlab.common.records import BACKENDS

#: this module is imported by :mod:`sarlab.simulator.hardware.profile` and imports nothing of it: a profile is any
#: object with the fields of :class:`~sarlab.simulator.hardware.profile.Profile`
Profile = Any

#: the backend a profile's own communication fields describe
BASE_BACKEND = "gloo"
#: the profile fields an overlay may replace: links, message software costs, per-round jitter
COMM_FIELDS = ("intra_host", "inter_host", "p2p_call_s", "p2p_op_s", "p2p_wait_s", "p2p_msg_cpu_s",
               "p2p_cpu_s_per_byte", "round_jitter_s")
LINK_FIELDS = ("intra_host", "inter_host")
#: the progress spread of ranks sharing a host's cores, ``{P: sigma_P}`` (:mod:`sarlab.simulator.system.spread`)
SPREAD_FIELDS = ("progress_spread",)
#: the background CPU costs a profile may price apart for hosts that launch more ranks than they have cores
CROWDED_FIELDS = ("p2p_msg_cpu_s", "p2p_cpu_s_per_byte")
#: those costs as measured there, ``{field: value}`` over :data:`CROWDED_FIELDS` (empty: the same as elsewhere)
CROWDED_KEY = "crowded_cpu"
#: every field an overlay may replace
OVERLAY_FIELDS = (*COMM_FIELDS, *SPREAD_FIELDS, CROWDED_KEY)
#: an overlay's provenance keys (not priced)
PROVENANCE_KEYS = ("notes", "meta")


def checked_spread(value, what: str) -> dict[int, float]:
    """A progress spread ``{P: sigma_P}`` with int worker counts and float spreads (the profile's own field and an
    overlay's); raises ValueError, naming ``what``, for a count below 1 or a negative spread."""
    table = {int(p): float(v) for p, v in dict(value).items()}
    if any(p < 1 or v < 0 for p, v in table.items()):
        raise ValueError(f"{what} needs worker counts >= 1 and spreads >= 0, got {table}")
    return table


def checked_crowded(value, what: str) -> dict[str, float]:
    """Background CPU costs of crowded hosts, ``{field: seconds}`` over :data:`CROWDED_FIELDS`; raises ValueError,
    naming ``what``, for another field or a negative cost."""
    table = {str(k): float(v) for k, v in dict(value).items()}
    unknown = sorted(set(table) - set(CROWDED_FIELDS))
    if unknown or any(v < 0 for v in table.values()):
        raise ValueError(f"{what} takes costs >= 0 of {', '.join(CROWDED_FIELDS)}, got {table}")
    return table


def comm_cpu(profile: Profile, ranks_per_host: int) -> tuple[float, float]:
    """``(p2p_msg_cpu_s, p2p_cpu_s_per_byte)`` of a host whose cores ``ranks_per_host`` ranks share: the profile's
    ``crowded_cpu`` values where they outnumber its ``cores_per_host`` (as the executor decides it: the ranks on
    the machine, an emulated network's hosts included, against the usable cores), else its own fields."""
    crowded = profile.crowded_cpu if ranks_per_host > profile.cores_per_host else {}
    per_message, per_byte = (crowded.get(name, getattr(profile, name)) for name in CROWDED_FIELDS)
    return per_message, per_byte


def known_backends() -> tuple[str, ...]:
    """The backends the engine knows (:data:`sarlab.common.records.BACKENDS`)."""
    return tuple(BACKENDS)


def overlay_from_json(name: str, d: dict[str, Any], link_type: type) -> dict[str, Any]:
    """An overlay read from JSON (links as ``link_type``, :class:`~sarlab.simulator.hardware.profile.Link`; costs as
    floats); raises ValueError naming an unknown field."""
    unknown = sorted(set(d) - set(OVERLAY_FIELDS) - set(PROVENANCE_KEYS))
    if unknown:
        raise ValueError(f"backend overlay {name!r} has fields {unknown} that are not communication fields; "
                         f"an overlay may set {', '.join(OVERLAY_FIELDS)} (and notes, meta)")
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key in LINK_FIELDS:
            out[key] = value if isinstance(value, link_type) else link_type(
                **{k: float(v) for k, v in value.items() if k in ("latency_s", "bandwidth_Bps", "gap_s")})
        elif key == "notes":
            out[key] = tuple(str(line) for line in value)
        elif key == "meta":
            out[key] = dict(value)
        elif key in SPREAD_FIELDS:
            out[key] = checked_spread(value, f"backend overlay {name!r}: {key}")
        elif key == CROWDED_KEY:
            out[key] = checked_crowded(value, f"backend overlay {name!r}: {key}")
        else:
            value = float(value)
            if value < 0:
                raise ValueError(f"backend overlay {name!r}: {key} must be >= 0, got {value}")
            out[key] = value
    return out


def overlay_to_json(overlay: dict[str, Any]) -> dict[str, Any]:
    """Plain-JSON form of an overlay (inverse of :func:`overlay_from_json`)."""
    out: dict[str, Any] = {}
    for key, value in overlay.items():
        if key in LINK_FIELDS:
            out[key] = {"latency_s": value.latency_s, "bandwidth_Bps": value.bandwidth_Bps, "gap_s": value.gap_s}
        elif key == "notes":
            out[key] = list(value)
        elif key in SPREAD_FIELDS:
            out[key] = {str(p): v for p, v in value.items()}
        elif key == CROWDED_KEY:
            out[key] = dict(value)
        else:
            out[key] = value
    return out


def backend_of(profile: Profile) -> str:
    """The backend whose communication costs ``profile`` prices (``meta["backend"]``; gloo unless overlaid)."""
    return str(profile.meta.get("backend", BASE_BACKEND))


def measured_backends(profile: Profile) -> list[str]:
    """The backends ``profile`` can price: gloo and its overlays."""
    return [BASE_BACKEND, *sorted(profile.backends)]


def for_backend(profile: Profile, name: str) -> Profile:
    """``profile`` with backend ``name``'s overlay in place of its communication fields (gloo: the profile itself).

    The result prices ``name`` (``meta["backend"]``), keeps every other field and carries no overlays; its notes
    gain the overlay's. Raises ValueError (one line) for an unknown backend, and for one this profile has no
    overlay of, saying how to measure it.
    """
    name = str(name or BASE_BACKEND)
    current = backend_of(profile)
    if name == current:
        return profile
    if current != BASE_BACKEND:
        raise ValueError(f"profile {profile.name!r} already prices backend {current!r}; take {name!r} from the "
                         "profile it was made from")
    if name not in profile.backends:
        if name not in known_backends():
            raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(known_backends())}")
        raise ValueError(
            f"profile {profile.name!r} has no communication costs measured over backend {name!r} (it has "
            f"{', '.join(measured_backends(profile))}); measure them with `sarlab calibrate --backend {name} --out "
            "PROFILE.json` (adds a backends." + name + " overlay to that profile, nothing else changes)")
    overlay = profile.backends[name]
    fields = {k: v for k, v in overlay.items() if k in OVERLAY_FIELDS}
    fields.setdefault(CROWDED_KEY, {})  # the profile's own crowded costs are gloo's, not this backend's
    notes = tuple(f"[{name}] {line}" for line in overlay.get("notes", ()))
    return replace(profile, **fields, backends={}, notes=(*profile.notes, *notes),
                   meta={**profile.meta, "backend": name})
