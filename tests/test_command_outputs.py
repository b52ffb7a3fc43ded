"""One output discipline for every command (issue 41 item 1): simulate, calibrate, plan, bench, profile,
reproduce, netbench and demo check each output path before any work, write atomically, and replace an existing file
only when sarlab wrote it or ``--force`` is given.

A table of commands x bad outputs runs in this process through the CLI's ``main`` (the checks come before any work,
so each case takes milliseconds): every refusal is exit 2 with one line naming the option, the user's file is
unchanged byte for byte, and the command's first step of real work (patched to raise :class:`Reached`) never ran.
With ``--force`` the same case gets past the checks to that first step. A few real runs (simulate, and calibrate and
plan with their work replaced by a stand-in) show files replaced, sarlab's own files re-written without ``--force``
and no temporary file left behind; the Python entry points raise the CLI's message as an ``OutputError``.
"""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from sarlab.data.validate_data import InputError
from sarlab.real.commands.cli import main as cli_main
from sarlab.real.launch import outputs

USER = b"the user's own file\n"
ESTIMATE = "estimate:nodes=2000,edges=20000,features=8,classes=4"
UNWRITABLE = "/proc/sarlab-nowhere"  # not writable even for root, unlike a chmod-ed folder


class Reached(BaseException):
    """Raised by the first step of a command's real work (not an error any command catches)."""


#: command -> (argv before the output option, the output option, its kind, the first step of work to patch, the
#: name the command writes: inside a "dir", after a "prefix", the file's own suffix for a "file")
COMMANDS = {
    "simulate --out": (["simulate", "--graph", ESTIMATE, "--workers", "2"], "--out", "file",
                       "sarlab.real.commands.simulate_cmd:resolve_profile", ".csv"),
    "simulate --json": (["simulate", "--graph", ESTIMATE, "--workers", "2"], "--json", "file",
                        "sarlab.real.commands.simulate_cmd:resolve_profile", ".json"),
    "simulate --validation-out": (["simulate", "--validate", "{work}/records.csv"], "--validation-out", "file",
                                  "sarlab.real.commands.simulate_cmd:resolve_profile", ".csv"),
    "simulate --plots": (["simulate", "--graph", ESTIMATE, "--workers", "2,4"], "--plots", "dir",
                         "sarlab.real.commands.simulate_cmd:resolve_profile", "simulator_scaling.png"),
    "calibrate --out": (["calibrate"], "--out", "file", "sarlab.real.commands.calibrate_cmd:calibrate", ".json"),
    "calibrate --json": (["calibrate", "--out", "{work}/fresh.json"], "--json", "file",
                         "sarlab.real.commands.calibrate_cmd:calibrate", ".json"),
    "plan --json": (["plan", "--graph", ESTIMATE, "--epochs", "2"], "--json", "file",
                    "sarlab.real.commands.plan_cmd:plan", ".json"),
    "bench engine --out": (["bench", "engine", "--quick"], "--out", "dir", "sarlab.real.bench.bench:preflight",
                           "engine_scaling.csv"),
    "bench engine --json": (["bench", "engine", "--quick", "--out", "{work}/bench"], "--json", "file",
                            "sarlab.real.bench.bench:preflight", ".json"),
    "bench kernels --out": (["bench", "kernels", "--quick"], "--out", "dir",
                            "sarlab.real.bench.kernel_bench:run_kernel_bench", "kernels.png"),
    "bench strategies --out": (["bench", "strategies"], "--out", "prefix",
                               "sarlab.real.bench.head_to_head:run_strategies", ".md"),
    "bench network --out": (["bench", "network", "{work}/records.csv"], "--out", "prefix",
                            "sarlab.real.bench.network_scaling:summarize_network", ".csv"),
    "profile --out": (["profile"], "--out", "dir", "sarlab.real.profile.command:preflight", "report.md"),
    "profile --json": (["profile", "--out", "{work}/prof"], "--json", "file", "sarlab.real.profile.command:preflight",
                       ".json"),
    "reproduce --out": (["reproduce", "--quick", "--only", "fig5"], "--out", "dir",
                        "sarlab.real.reproduce.reproduce:run_step", "reproduce_fig5_fig6.json"),
    "reproduce --json": (["reproduce", "--quick", "--only", "fig5", "--out", "{work}/rep"], "--json", "file",
                         "sarlab.real.reproduce.reproduce:run_step", ".json"),
    "netbench --out": (["netbench", "--net", "veth:rate=10mbit"], "--out", "file",
                       "sarlab.real.bench.netbench:measure_links", ".json"),
    "demo --json": (["demo"], "--json", "file", "sarlab.real.commands.demo:load_graph", ".json"),
}

#: bad output -> the text its one line holds
CASES = {
    "existing user file": "--force",
    "wrong kind": "give a",
    "unwritable folder": "cannot write into",
    "300-byte name": "over the 255-byte limit of a file name",
    "path over 4096 bytes": "over the 4095-byte limit of Linux paths",
}


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """A cache of this test's own (the ledger of files sarlab wrote lives there), beside the work folders."""
    monkeypatch.setenv("SARLAB_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def _patch_work(monkeypatch, target: str) -> list:
    module, attr = target.split(":")
    calls: list = []

    def first_step(*args, **kwargs):
        calls.append(args)
        raise Reached(target)

    monkeypatch.setattr(f"{module}.{attr}", first_step)
    return calls


def _setup(case: str, kind: str, name: str, work: str) -> tuple[str, str | None]:
    """(the output path to pass, the user's file that must stay unchanged or None)."""
    base = os.path.join(work, "target")
    if case == "existing user file":
        path = base + name if kind == "file" else base
        user = os.path.join(base, name) if kind == "dir" else base + name
        os.makedirs(os.path.dirname(user), exist_ok=True)
        with open(user, "wb") as f:
            f.write(USER)
        return path, user
    if case == "wrong kind":
        if kind == "dir":  # a file where the directory must be
            with open(base, "wb") as f:
                f.write(USER)
            return base, base
        os.makedirs(base + name)  # a directory where the file must be
        return (base + name if kind == "file" else base), None
    if case == "unwritable folder":
        return f"{UNWRITABLE}/target{name if kind == 'file' else ''}", None
    if case == "300-byte name":
        return os.path.join(work, "n" * 300 + (name if kind == "file" else "")), None
    deep = os.path.join(work, *["d" * 200] * 21)  # over 4096 bytes
    return os.path.join(deep, "target" + (name if kind == "file" else "")), None


def _argv(command: str, path: str, work: str) -> list[str]:
    before, option = COMMANDS[command][:2]
    return [a.replace("{work}", work) for a in before] + [option, path]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_bad_outputs_are_refused_before_any_work(command, tmp_path, monkeypatch, capsys):
    """Each bad output: exit 2, one line naming the option and what is wrong, the user's file unchanged, no work
    started and nothing left in the work folder; with --force an existing user file lets the command start."""
    _, option, kind, target, name = COMMANDS[command]
    calls = _patch_work(monkeypatch, target)
    failures = []
    for case, text in CASES.items():
        work = str(tmp_path / case.replace(" ", "_"))
        os.makedirs(work)
        path, user = _setup(case, kind, name, work)
        before = sorted(os.listdir(work))
        try:
            code = cli_main(_argv(command, path, work))
        except SystemExit as done:  # argparse
            code = done.code
        err = capsys.readouterr().err
        lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
        if code != 2 or len(lines) != 1 or text not in err or option not in err or "Traceback" in err:
            failures.append(f"{case}: exit {code}, wanted {text!r} and {option!r} in one line:\n{err}")
        if user is not None and open(user, "rb").read() != USER:
            failures.append(f"{case}: the user's file {user} changed")
        if sorted(os.listdir(work)) != before:
            failures.append(f"{case}: the work folder changed: {before} -> {sorted(os.listdir(work))}")
    assert not failures, f"{command}:\n" + "\n".join(failures)
    assert calls == []  # no work started
    # --force: past the checks, to the first step of work, with the user's file still whole until then
    work = str(tmp_path / "forced")
    os.makedirs(work)
    with open(os.path.join(work, "records.csv"), "w") as f:  # what bench network reads before its work
        f.write("net\nloopback\n")
    path, user = _setup("existing user file", kind, name, work)
    with pytest.raises(Reached):
        cli_main([*_argv(command, path, work), "--force"])
    assert len(calls) == 1 and open(user, "rb").read() == USER


def _simulate(out: str, json_path: str, *extra: str) -> int:
    return cli_main(["simulate", "--graph", ESTIMATE, "--workers", "2", "--modes", "sar", "--profile",
                     "reference-laptop", "--out", out, "--json", json_path, *extra])


def test_simulate_replaces_with_force_and_rewrites_its_own_files(tmp_path, capsys):
    """A user's files are replaced only with --force; a file sarlab wrote is re-written without it, unless someone
    changed it since; no temporary file is left beside the outputs."""
    out, js = str(tmp_path / "r.csv"), str(tmp_path / "r.json")
    for path in (out, js):
        with open(path, "wb") as f:
            f.write(USER)
    assert _simulate(out, js) == 2
    assert open(out, "rb").read() == USER and open(js, "rb").read() == USER
    capsys.readouterr()
    assert _simulate(out, js, "--force") == 0
    assert set(pd.read_csv(out)["mode"]) == {"sar"} and json.load(open(js))["graph"] == ESTIMATE
    assert outputs.sarlab_wrote(out) and outputs.sarlab_wrote(js)
    assert _simulate(out, js) == 0  # its own files: no --force needed
    with open(js, "ab") as f:  # the user edits the JSON: it is theirs now
        f.write(b"\n")
    capsys.readouterr()
    assert _simulate(out, js) == 2
    err = capsys.readouterr().err
    assert f"--json {js!r} already exists" in err and len(err.strip().splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == ["r.csv", "r.json"]  # no .r.csv-<pid>-*.tmp left


def test_calibrate_and_plan_replace_with_force(tmp_path, monkeypatch, capsys):
    """calibrate --out and plan --json (their work replaced by stand-ins): refused on a user's file, replaced with
    --force, and a default in sarlab's cache is replaced without it."""
    from sarlab.simulator.hardware.profile import load_profile, reference_laptop

    monkeypatch.setattr("sarlab.real.commands.calibrate_cmd.calibrate", lambda cal, name: reference_laptop())
    prof = tmp_path / "p.json"
    prof.write_bytes(USER)
    assert cli_main(["calibrate", "--out", str(prof)]) == 2 and prof.read_bytes() == USER
    assert cli_main(["calibrate", "--out", str(prof), "--force"]) == 0
    assert load_profile(prof).name == reference_laptop().name
    default = outputs.cache_root() / "simulator_profile.json"  # this test's cache, never the real one
    monkeypatch.setattr("sarlab.real.commands.calibrate_cmd.LOCAL_PROFILE", default)
    default.parent.mkdir(parents=True, exist_ok=True)
    default.write_bytes(USER)  # in the cache: calibrate's own place
    assert cli_main(["calibrate"]) == 0 and load_profile(default).name == reference_laptop().name

    row = {"strategy": "sar", "resource": "cpu", "workers": 2, "epoch_s": 1.0, "time_s": 2.0, "cost_usd": 0.1,
           "value": 5.0, "mem_gib": 0.1, "fits": True, "detail": ""}
    result = {"candidates": [row], "picks": {"best_value": row}, "model": "sage", "epochs": 2, "note": "n",
              "profile": "p", "profile_source": "s"}
    monkeypatch.setattr("sarlab.real.commands.plan_cmd.plan", lambda a: result)
    js = tmp_path / "plan.json"
    js.write_bytes(USER)
    assert cli_main(["plan", "--graph", ESTIMATE, "--epochs", "2", "--json", str(js)]) == 2
    assert js.read_bytes() == USER
    assert cli_main(["plan", "--graph", ESTIMATE, "--epochs", "2", "--json", str(js), "--force"]) == 0
    assert json.loads(js.read_text())["picks"]["best_value"]["strategy"] == "sar"
    capsys.readouterr()


def test_python_entry_points_raise_the_cli_message(tmp_path, capsys):
    """The Python forms raise :class:`OutputError` (an ``InputError``) with the line the CLI prints."""
    from sarlab.real.commands.demo import run_demo

    user = tmp_path / "notes.json"
    user.write_bytes(USER)
    assert cli_main(["demo", "--json", str(user)]) == 2
    line = capsys.readouterr().err.strip()
    with pytest.raises(outputs.OutputError) as err:
        run_demo(json_path=str(user))
    assert isinstance(err.value, InputError) and line == f"error: {err.value}"
    with pytest.raises(outputs.OutputError, match=r"--out '.*' is a directory; give a file path"):
        outputs.check_file(str(tmp_path), "--out")
    assert user.read_bytes() == USER


def test_a_closed_pipe_ends_the_script_quietly():
    """``sarlab simulate --help | true``: the reader is gone before the help is written; the script exits 141 (as a
    shell's tools do on SIGPIPE) with nothing on stderr, not a BrokenPipeError traceback."""
    import subprocess
    import sys

    code = "import sys; from sarlab.real.commands.cli import main; sys.exit(main())"
    proc = subprocess.Popen([sys.executable, "-c", code, "simulate", "--help"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # no reader: the first write fails with EPIPE
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
