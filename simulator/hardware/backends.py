"""Per-backend communication overlays of a profile: what the links and message software cost over another
torch.distributed backend than gloo.

A profile's own link and message fields (:data:`COMM_FIELDS`) are gloo's, what ``sarlab calibrate`` measures by
default. ``Profile.backends`` maps another backend's name to an overlay: some or all of :data:`COMM_FIELDS`,
measured over that backend by the same benchmarks (``sarlab calibrate --backend NAME``:
:mod:`sarlab.simulator.calibration.netbench` and :mod:`sarlab.simulator.calibration.commbench`), plus its
provenance (``notes``: lines; ``meta``: date, command, load). :func:`for_backend` returns the profile with the
overlay's fields in place of its own and everything else (op costs, memory, placement, progress spread) unchanged.
In JSON an overlay is an object under the profile's ``backends`` key, links as ``{latency_s, bandwidth_Bps,
gap_s}`` objects; profiles without the key load as gloo-only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

#: this module is imported by :mod:`sarlab.simulator.hardware.profile` and imports nothing of it: a profile is any
#: object with the fields of :class:`~sarlab.simulator.hardware.profile.Profile`
Profile = Any

#: the backend a profile's own communication fields describe
BASE_BACKEND = "gloo"
#: the profile fields an overlay may replace: links, message software costs, per-round jitter
COMM_FIELDS = ("intra_host", "inter_host", "p2p_call_s", "p2p_op_s", "p2p_wait_s", "p2p_msg_cpu_s",
               "p2p_cpu_s_per_byte", "round_jitter_s")
LINK_FIELDS = ("intra_host", "inter_host")
#: an overlay's provenance keys (not priced)
PROVENANCE_KEYS = ("notes", "meta")


def known_backends() -> tuple[str, ...]:
    """The backends the engine knows (:data:`sarlab.core.comm.BACKENDS`)."""
    from sarlab.core.comm import BACKENDS  # torch.distributed: imported only when a name has to be checked

    return tuple(BACKENDS)


def overlay_from_json(name: str, d: dict[str, Any], link_type: type) -> dict[str, Any]:
    """An overlay read from JSON (links as ``link_type``, :class:`~sarlab.simulator.hardware.profile.Link`; costs as
    floats); raises ValueError naming an unknown field."""
    unknown = sorted(set(d) - set(COMM_FIELDS) - set(PROVENANCE_KEYS))
    if unknown:
        raise ValueError(f"backend overlay {name!r} has fields {unknown} that are not communication fields; "
                         f"an overlay may set {', '.join(COMM_FIELDS)} (and notes, meta)")
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key in LINK_FIELDS:
            out[key] = value if isinstance(value, link_type) else link_type(
                **{k: float(v) for k, v in value.items() if k in ("latency_s", "bandwidth_Bps", "gap_s")})
        elif key == "notes":
            out[key] = tuple(str(line) for line in value)
        elif key == "meta":
            out[key] = dict(value)
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
    fields = {k: v for k, v in overlay.items() if k in COMM_FIELDS}
    notes = tuple(f"[{name}] {line}" for line in overlay.get("notes", ()))
    return replace(profile, **fields, backends={}, notes=(*profile.notes, *notes),
                   meta={**profile.meta, "backend": name})
