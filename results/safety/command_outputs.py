"""The table of tests/test_command_outputs.py (commands x bad outputs), run once and written as
results/safety/command_outputs.md: per case the exit status, the one line printed, whether the user's file stayed
whole and whether any work started; then each command's existing user file again with --force.

Run from the checkout: ``python results/safety/command_outputs.py`` (a few seconds; nothing is trained or measured:
each command's first step of work is replaced by a stand-in that records that it was reached).
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from test_command_outputs import CASES, COMMANDS, USER, Reached, _argv, _setup  # noqa: E402

from sarlab.real.commands.cli import main as cli_main  # noqa: E402


def run_case(command: str, case: str, root: str, force: bool = False) -> dict:
    """One command on one bad output: exit status, its stderr's last line, user's file whole, work reached."""
    _, option, kind, target, name = COMMANDS[command]
    work = os.path.join(root, f"{command.replace(' ', '_')}-{case.replace(' ', '_')}-{int(force)}")
    os.makedirs(work)
    with open(os.path.join(work, "records.csv"), "w") as f:
        f.write("net\nloopback\n")
    path, user = _setup(case, kind, name, work)
    module, attr = target.split(":")
    reached = []

    def first_step(*args, **kwargs):
        reached.append(1)
        raise Reached(target)

    err = io.StringIO()
    start = time.process_time()
    with mock.patch(f"{module}.{attr}", first_step), contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli_main(_argv(command, path, work) + (["--force"] if force else []))
        except SystemExit as done:
            code = done.code
        except Reached:
            code = "reached work"
    lines = [line for line in err.getvalue().strip().splitlines() if not line.startswith("warning:")]
    return {"code": code, "line": (lines[-1] if lines else "").replace(root, "$TMP"), "lines": len(lines),
            "whole": user is None or open(user, "rb").read() == USER, "work": bool(reached),
            "cpu_s": time.process_time() - start}


def main() -> int:
    os.environ["SARLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="sarlab-outputs-cache-")
    root = tempfile.mkdtemp(prefix="sarlab-outputs-")
    rows = ["| command | bad output | exit | lines | user's file whole | work started | the line (shortened) |",
            "|---|---|---:|---:|---|---|---|"]
    worst = 0.0
    for command in COMMANDS:
        for case in CASES:
            r = run_case(command, case, root)
            worst = max(worst, r["cpu_s"])
            line = r["line"] if len(r["line"]) <= 110 else r["line"][:60] + " ... " + r["line"][-45:]
            rows.append(f"| `{command}` | {case} | {r['code']} | {r['lines']} | {'yes' if r['whole'] else 'NO'} | "
                        f"{'YES' if r['work'] else 'no'} | {line.replace('|', '/')} |")
        r = run_case(command, "existing user file", root, force=True)
        rows.append(f"| `{command}` | existing user file, `--force` | {r['code']} | {r['lines']} | "
                    f"{'yes' if r['whole'] else 'NO'} (until the work) | {'yes' if r['work'] else 'NO'} | |")
    text = "\n".join([
        "# Output discipline of every command: commands x bad outputs",
        "",
        f"`python results/safety/command_outputs.py` (the table of tests/test_command_outputs.py); worst CPU time of "
        f"one case {worst:.2f} s. Each command's first step of work is a stand-in that records that it was "
        "reached; a refusal must come before it.",
        "",
        *rows, ""])
    (HERE / "command_outputs.md").write_text(text)
    print(text)
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(os.environ["SARLAB_CACHE_DIR"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
