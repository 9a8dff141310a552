"""The command line by the ecosystem's conventions: --version, help on a bare command, a description on
every command and argument, --project/--debug everywhere and --with-benchmarks only where it applies,
usage errors as one line and a --help hint, a malformed --filters and a missing LLM model said plainly."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from chunkyard.orchestration.cli import build_parser, main
from chunkyard.orchestration.cli_help import commands

from tests.cli_helpers import STATE_VARIABLES

# the commands that read the project's collections (benchmark collections are collections)
BENCHMARK_COMMANDS = {
    "chunkyard",
    "chunkyard index",
    "chunkyard demo",
    "chunkyard ui",
    "chunkyard search",
    "chunkyard check",
}


def test_version_and_help_on_a_bare_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("chunkyard 0.")
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: chunkyard") and "chunkyard index [NAME]" in out and "search" in out


def test_every_command_and_argument_is_described() -> None:
    for name, parser in commands(build_parser()).items():
        if name == "chunkyard eval":  # its arguments are pipeline.benchmark's (`chunkyard eval --help`)
            continue
        assert parser.description, f"{name}: no description"
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"{name} {action.option_strings or action.dest}: no help"
        flags = {flag for action in parser._actions for flag in action.option_strings}
        if parser._subparsers is None:  # a command that runs (not a group of actions)
            assert {"--project", "--debug"} <= flags, name
        assert ("--with-benchmarks" in flags) == (name in BENCHMARK_COMMANDS), name


def test_usage_errors_are_one_line_with_a_help_hint(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in [
        (["search"], "the following arguments are required: query"),
        (["index", "--colour"], "unrecognized arguments: --colour"),
        (["search", "q", "-k", "many"], "argument -k/--k: expected an integer"),
        (["search", "q", "--filters", "{lang: en}"], "--filters: must be a JSON object"),
        (["search", "q", "--filters", "[1]"], 'e.g. \'{"lang": "en"}\''),
    ]:
        with pytest.raises(SystemExit) as done:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert done.value.code == 2 and len(err) == 2, err
        assert err[0].startswith(f"chunkyard {argv[0]}: ") and needle in err[0], err
        assert err[1] == f"hint: `chunkyard {argv[0]} --help` describes every argument"


def test_project_and_debug_after_eval_instance_and_compose(
    tmp_path: Path, clean_env, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.chdir(tmp_path)
    assert main(["eval", "--project", str(tmp_path / "nowhere"), "--dataset", "x"]) == 2
    assert "nowhere: not a chunkyard project" in capsys.readouterr().err
    with pytest.raises(Exception, match="not a chunkyard project"):  # --debug: the traceback
        main(["eval", "--debug", "--project", str(tmp_path / "nowhere")])
    parsed = build_parser().parse_args(["stack", "compose", "--project", "p", "--debug"])
    assert parsed.project == "p" and parsed.debug
    parsed = build_parser().parse_args(["instance", "--project", "p"])
    assert parsed.project == "p"


def test_questions_generate_names_no_default_model(
    tmp_path: Path, clean_env, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_env.delenv("CHUNKYARD_LLM_MODEL", raising=False)
    (tmp_path / "docs").mkdir()
    assert main(["init", str(tmp_path)]) == 0
    clean_env.chdir(tmp_path)
    assert main(["add", "mine", str(tmp_path / "docs")]) == 0
    capsys.readouterr()
    assert main(["questions", "generate", "--collection", "mine", "--llm", "http://127.0.0.1:18699"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "chunkyard questions: --model: name the model http://127.0.0.1:18699 serves (e.g. llama3.1), "
        "or set CHUNKYARD_LLM_MODEL"
    )


@pytest.mark.slow
def test_ctrl_c_during_index_is_one_line_and_the_next_run_resumes(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "docs").mkdir()
    for i in range(3):
        (tmp_path / "docs" / f"n{i}.md").write_text(
            f"# Note {i}\n\nThe heron number {i} waits by the pond.\n"
        )
    (tmp_path / "chunkyard.yaml").write_text(
        f"collections:\n  mine:\n    folders: [{tmp_path / 'docs'}]\n    indexes: [recursive-256]\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}
    cli = [sys.executable, "-m", "chunkyard.orchestration.cli", "index"]
    process = subprocess.Popen(  # a group of its own, as a terminal's foreground job
        cli,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "[1/" in line:  # the first step is done: interrupt the run in the middle
            break
    for _ in range(5):  # Dagster acts on Ctrl-C inside a step; a person presses it again if need be
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        try:
            out, err = process.communicate(timeout=30)
            break
        except subprocess.TimeoutExpired:
            continue
    else:
        out, err = process.communicate(timeout=600)
    assert process.returncode == 130, (out, err)
    assert (
        err.strip().splitlines()[-1] == "chunkyard index: interrupted; run `chunkyard index` again to resume"
    )
    assert "Traceback" not in err and "InterruptedError" not in out + err and "FAILED" not in out, (out, err)
    assert "stopped" in out or "[2/" not in out  # the interrupted step, if it had started
    again = subprocess.run(cli, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0 and "succeeded" in again.stdout, again.stdout + again.stderr
