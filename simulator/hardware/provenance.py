"""Which profile ``sarlab simulate`` uses, where it came from, and whether it describes this machine.

Profiles are inputs: the calibrated ones that ship with the simulator live in ``simulator/profiles/``
(:data:`DEFAULT_PROFILE` is the 2-core AMD EPYC VM the validation campaigns ran on), presets of assumed
figures in :mod:`sarlab.simulator.hardware.profile`, and a machine's own calibration where ``sarlab calibrate`` writes
it by default (:data:`LOCAL_PROFILE`). A calibrated profile names the CPU it was measured on
(``meta["machine"]``, :func:`sarlab.common.machine.cpu_model`); :func:`machine_warnings` says when that is not this
machine, :func:`plausibility_warnings` when the profile's thread efficiencies are implausible for its cores or
its compute scale lies outside the plausible range.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sarlab.common.machine import cpu_model, usable_cores
from sarlab.common.paths import cache_dir
from sarlab.simulator.hardware.describe import PREFIX, describe_profile
from sarlab.simulator.hardware.plausibility import implausible_compute_scale, implausible_thread_effs
from sarlab.simulator.hardware.profile import MICROBENCHMARK_MEMORY, PRESETS, Profile, load_profile

#: calibrated profiles shipped with the simulator, by name (the file's stem)
PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
#: what ``sarlab simulate`` uses when this machine has no calibration of its own
DEFAULT_PROFILE = PROFILES_DIR / "epyc-2core.json"
#: where ``sarlab calibrate`` writes by default (relative to the working directory, git-ignored)
LOCAL_PROFILE = cache_dir("simulator_profile.json")  # per-user cache (or a checkout's .cache), not the cwd


def shipped_profiles() -> dict[str, Path]:
    """The profiles in ``simulator/profiles/``, by name."""
    return {path.stem: path for path in sorted(PROFILES_DIR.glob("*.json"))}


def resolve_profile(spec: str | None) -> tuple[Profile, str]:
    """The profile ``spec`` names and where it came from.

    ``spec``: a preset (``icelake-hdr200``...), the name of a shipped profile (``epyc-2core``...) or a JSON
    path; ``None``: this machine's own calibration (:data:`LOCAL_PROFILE`) when it exists, else
    :data:`DEFAULT_PROFILE`; ``describe:...``: a machine described from a calibrated one
    (:func:`sarlab.simulator.hardware.describe.describe_profile`).
    """
    if spec is not None and str(spec).startswith(PREFIX):
        return describe_profile(str(spec), resolve_profile), str(spec)
    if spec is None:
        path = LOCAL_PROFILE if LOCAL_PROFILE.exists() else DEFAULT_PROFILE
        return load_profile(path), str(path)
    if spec in PRESETS:
        return load_profile(spec), f"preset {spec}"
    shipped = shipped_profiles()
    path = shipped.get(spec, Path(spec))
    return load_profile(path), str(path)


def profile_line(profile: Profile, source: str) -> str:
    """One line: the profile's name, where it came from and what machine it describes."""
    meta = profile.meta
    if meta.get("source") == "preset" or "machine" not in meta:
        return f"profile {profile.name} ({source}: {meta.get('machine', 'assumed figures')})"
    if meta.get("source") == "describe":  # the host is described; the calibration was of the base's cores
        n = meta.get("base_cores", "?")
        return (f"profile {profile.name} from {source}: {profile.cores_per_host} cores described from a calibration "
                f"on {meta['machine']} ({n} core{'' if n == 1 else 's'}) on {meta.get('date', 'an unknown date')}")
    return (f"profile {profile.name} from {source}: calibrated on {meta['machine']} "
            f"({profile.cores_per_host} cores) on {meta.get('date', 'an unknown date')}")  # fmt: skip


def machine_warnings(profile: Profile, cpu: str | None = None, cores: int | None = None) -> list[str]:
    """Why ``profile`` may not describe this machine (``cpu`` and ``cores`` default to this machine's): a
    calibration on another CPU or with another core count. Presets describe other machines on purpose and
    get no warning."""
    meta = profile.meta
    if meta.get("source") == "preset" or not meta.get("machine"):
        return []
    cpu = cpu_model() if cpu is None else cpu
    cores = usable_cores() if cores is None else cores
    if meta["machine"] != cpu:
        return [f"the profile was calibrated on {meta['machine']}, this machine is {cpu}: its predictions are the "
                f"other CPU's; run `sarlab calibrate` here (it writes {LOCAL_PROFILE}, which `sarlab simulate` "
                "then uses by default)"]  # fmt: skip
    if profile.cores_per_host != cores:
        return [f"the profile was calibrated with {profile.cores_per_host} usable cores, this process has {cores}: "
                "threads per worker and co-located workers are priced for the other count"]  # fmt: skip
    return []


def plausibility_warnings(profile: Profile) -> list[str]:
    """Why ``profile``'s calibration is implausible, one line each: op families whose thread efficiencies are
    implausible for the cores they were measured on
    (:func:`sarlab.simulator.hardware.plausibility.implausible_thread_effs`), and a compute scale outside
    :data:`sarlab.simulator.hardware.plausibility.COMPUTE_SCALE_RANGE`
    (:func:`sarlab.simulator.hardware.plausibility.implausible_compute_scale`): ``compute_scale`` itself or any point of
    its ``compute_scale_curve``, so that a shipped or older profile is flagged by ``sarlab simulate`` too, not only by
    the ``sarlab calibrate`` that made it."""
    measured = profile.meta.get("threads_measured") or [profile.cores_per_host]
    lines = [f"implausible calibration, {line}: predictions for multi-thread workers are off"
             for line in implausible_thread_effs(profile.ops, int(measured[-1]))]  # fmt: skip
    # judged under the microbenchmarks' allocator: a curve fitted on live runs (about 2x faster here) is stated
    # for rss first, as the calibration itself judges it
    judged = profile.for_memory(MICROBENCHMARK_MEMORY)
    scales = [judged.compute_scale] + [float(value) for _, value in judged.compute_scale_curve]
    worst = max(scales, key=lambda value: abs(np.log(max(value, 1e-300))))
    lines += [f"implausible calibration, {line}; every compute cost is multiplied by it"
              for line in implausible_compute_scale(worst)]  # fmt: skip
    return lines
