"""The report programs as swinkit subcommands (attribute, what-if, predict, engines), the exit
codes they share, and tools/attribute.py: thin, choosing the same programs by its options."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_attribute_cli import _phases, _write_results

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "attribute.py"


def _swinkit(capsys, *args):
    """``python -m swinkit ARGS`` in this process: (exit code, stdout, stderr)."""
    from swinkit.cli import main
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse: --help, bad choices
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def results(tmp_path):
    machine = tmp_path / "results" / "box"
    _write_results(machine, "a" * 40, {1: _phases(), 2: _phases(exposed_comm=0.2)}, date=1)
    return tmp_path / "results"


def test_attribute_subcommand_writes_the_report_tools_attribute_writes(results, tmp_path,
                                                                       capsys):
    mine, theirs = tmp_path / "mine.json", tmp_path / "theirs.json"
    code, _, err = _swinkit(capsys, "attribute", "--results", str(results), "--json", str(mine))
    assert code == 0, err
    tool = subprocess.run([sys.executable, str(TOOL), "--results", str(results), "--json",
                           str(theirs)], capture_output=True, text=True, timeout=180)
    assert tool.returncode == 0, tool.stderr
    a, b = json.loads(mine.read_text()), json.loads(theirs.read_text())
    assert a["runs"] == b["runs"] and a["commit"] == b["commit"] == "a" * 40


@pytest.mark.parametrize("args, code, message", [
    (["attribute", "--results", "{tmp}/none"], 3, "no asv results"),
    (["what-if", "--results", "{results}"], 3, "no what-if results for this commit"),
    (["predict", "--stored", "{tmp}/missing.json", "--predict", "4"], 2, "missing.json"),
    (["predict", "--predict-from", "1"], 2, "--predict-from needs --run"),
    (["engines", "ddp,zero3"], 2, "unknown ['zero3']"),
    (["attribute", "--run", "--world-sizes", "0"], 2, "--world-sizes must be integers >= 1"),
])
def test_subcommands_answer_with_the_exit_code_table(args, code, message, results, tmp_path,
                                                     capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a.format(tmp=tmp_path, results=results) for a in args]
    got, _, err = _swinkit(capsys, *args)
    assert got == code, err
    assert message in err


def test_what_if_list_and_engines_list(capsys):
    from swinkit.experiments.remedies import CATALOGUE
    code, out, _ = _swinkit(capsys, "what-if", "--list")
    assert code == 0 and all(name in out for name in CATALOGUE)
    code, out, _ = _swinkit(capsys, "engines", "--list")
    assert code == 0
    for name in ("ddp", "deepspeed", "fsdp2", "dp", "dp-vanilla"):
        assert f"\n{name} " in "\n" + out


def test_predict_subcommand_projects_the_thesis(tmp_path, capsys):
    code, _, err = _swinkit(capsys, "predict", "--preset", "thesis", "--predict", "1,2,4",
                            "--json", str(tmp_path / "p.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "p.json").read_text())["predicted"] is True


def test_every_help_states_the_one_exit_code_table(capsys):
    from swinkit.cli.exit_codes import MEANINGS
    for args in (["--help"], ["attribute", "--help"]):
        text = " ".join(_swinkit(capsys, *args)[1].split())   # argparse re-wraps the epilog
        assert f"3 {MEANINGS[3]}" in text
    tool = subprocess.run([sys.executable, str(TOOL), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert "3 no usable measurements to read" in " ".join(tool.stdout.split())


@pytest.mark.parametrize("argv, program", [
    ([], "attribute"),
    (["--against", "abc"], "attribute"),
    (["--list-remedies"], "attribute"),            # the what-if catalogue, listed
    (["--what-if", "default"], "attribute"),       # the attribution with what-ifs
    (["--predict", "4"], "predict"),
    (["--stored", "p.json"], "predict"),
    (["--nodes", "2"], "predict"),
    (["--run", "--nodes", "2"], "attribute"),
    (["--run", "--engine", "all"], "engines"),
])
def test_tools_attribute_chooses_the_program_its_options_name(argv, program):
    from swinkit.cli import attribute_compat
    args = attribute_compat.get_parser().parse_args(argv)
    assert attribute_compat.choose(args).__module__ == f"swinkit.cli.{program}"


def test_tools_attribute_is_a_thin_entry_point():
    assert len(TOOL.read_text().splitlines()) <= 80
