import sys, os
if os.environ.get("H18_PRELOAD") and any("zygote" in a for a in getattr(sys, "orig_argv", [])):
    import sarlab.simulator, sarlab.real.calibration.opbench, sarlab.real.calibration.harness  # noqa
