"""What the simulator's commands show: result lines on stdout, warnings on stderr, and their ``--json`` files."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from sarlab.real.launch import outputs


def say(line: str) -> None:
    """A result line on stdout."""
    print(line, flush=True)


def warn(line: str) -> None:
    """A warning line on stderr."""
    print(f"warning: {line}", file=sys.stderr, flush=True)


def write_json_file(path: str, payload: dict[str, Any]) -> None:
    """``payload`` as indented JSON at ``path`` (parents created; atomically:
    :func:`sarlab.real.launch.outputs.write_bytes`), then say so."""
    target = Path(path)
    outputs.write_bytes(target, json.dumps(payload, indent=1, default=json_default) + "\n")
    say(f"wrote {target}")


def json_default(obj: Any) -> Any:
    """numpy scalars as Python numbers, NaN as null, anything else as its text."""
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return str(obj)
