"""A make-like cache of finished work: a step's manifest says which units ran with which parameters.

``reproduce_<step>.json`` in the output directory holds, per unit, the hash of its parameters, the files it
wrote and its provenance. A unit is current when the hash matches and its files are all there (non-empty); a
step is current when it completed and all its units are current. Manifests are written atomically.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sarlab.real.launch import outputs

MANIFEST_VERSION = 1


def params_sha(obj: Any) -> str:
    """A short, order-independent hash of JSON-able parameters."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def manifest_path(out: Path, step: str) -> Path:
    return out / f"reproduce_{step}.json"


def read_manifest(out: Path, step: str) -> dict[str, Any]:
    """The step's manifest, or ``{}`` when it is missing, unreadable or of another format."""
    try:
        data = json.loads(manifest_path(out, step).read_text())
    except (OSError, ValueError):
        return {}
    return data if data.get("format_version") == MANIFEST_VERSION and data.get("step") == step else {}


def write_manifest(out: Path, step: str, data: dict[str, Any]) -> None:
    """Write the step's manifest atomically (:func:`sarlab.real.launch.outputs.write_bytes`)."""
    outputs.write_bytes(manifest_path(out, step), json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")


def outputs_present(out: Path, files: dict[str, str]) -> bool:
    return all((out / f).is_file() and (out / f).stat().st_size > 0 for f in files)


def unit_current(entry: dict[str, Any] | None, params: dict[str, Any], outputs: dict[str, str], out: Path) -> bool:
    """A unit is done when its manifest entry has the same parameters and its outputs are all there."""
    return bool(entry) and entry.get("params_sha") == params_sha(params) and outputs_present(out, outputs)


def step_current(manifest: dict[str, Any], units: dict[str, dict[str, Any]], outputs: dict[str, dict[str, str]],
                 out: Path) -> bool:
    """Every unit of a completed step is current (``outputs``: unit -> its files)."""
    return (bool(manifest.get("complete")) and manifest.get("params_sha") == params_sha(units)
            and all(unit_current(manifest.get("units", {}).get(u), p, outputs[u], out) for u, p in units.items()))
