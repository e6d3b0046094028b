"""Progress bars (flax_posenc/progress.py): shown on a terminal, silent when stderr is not one and
under --json; the command line's convert, extend and inspect go through it."""

from __future__ import annotations

import io
import sys

import pytest

from flax_posenc.progress import Progress, progress_enabled
from flax_posenc.report.cli import main as cli_main


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (what a person running the command has)."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """``terminal()`` makes sys.stderr a :class:`Terminal` and returns it (called inside the test:
    pytest puts its own capture back on sys.stderr between a fixture's setup and the test)."""

    def install() -> Terminal:
        stream = Terminal()
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    return install


def test_enabled_only_for_a_terminal_and_never_with_json():
    assert progress_enabled(stream=Terminal())
    assert not progress_enabled(stream=io.StringIO())
    assert not progress_enabled(stream=Terminal(), json=True)
    closed = io.StringIO()
    closed.close()  # isatty() raises ValueError
    assert not progress_enabled(stream=closed)


def test_not_a_terminal_writes_nothing(capsys):
    with Progress(3, desc="work") as bar:
        assert bar.run("loading", lambda: 41) + 1 == 42
        bar.update(2, loss="0.5")
    assert capsys.readouterr().err == ""


def test_a_terminal_shows_the_bar(terminal):
    terminal = terminal()
    with Progress(3, desc="work") as bar:
        assert bar.run("loading", lambda: 7) == 7
        bar.update(2, loss="0.5")
    shown = terminal.getvalue()
    assert "work:" in shown and "loading:" in shown and "/3 [" in shown


@pytest.fixture(scope="module")
def gpt2(tiny_checkpoint):
    return tiny_checkpoint("gpt2")


def test_convert_and_extend_are_quiet_when_stderr_is_not_a_terminal(gpt2, tmp_path, capsys):
    assert cli_main(["convert", str(gpt2.path), "--out", str(tmp_path / "g.msgpack")]) == 0
    assert cli_main(["extend", str(gpt2.path), "--length", "64", "--out", str(tmp_path / "g64")]) == 0
    assert capsys.readouterr().err == ""


def test_convert_and_extend_show_their_steps_on_a_terminal(gpt2, tmp_path, terminal):
    terminal = terminal()
    assert cli_main(["convert", str(gpt2.path), "--out", str(tmp_path / "g.msgpack")]) == 0
    shown = terminal.getvalue()
    assert "reading:" in shown and "writing:" in shown and "/2 [" in shown
    terminal.seek(0)
    terminal.truncate()
    assert cli_main(["extend", str(gpt2.path), "--length", "64", "--out", str(tmp_path / "g64")]) == 0
    shown = terminal.getvalue()
    assert "reading:" in shown and "extending (tile):" in shown and "writing:" in shown and "/3 [" in shown


def test_json_output_is_never_mixed_with_a_bar(gpt2, terminal):
    terminal = terminal()
    assert cli_main(["inspect", str(gpt2.path), "--json"]) == 0
    assert terminal.getvalue() == ""
    assert cli_main(["inspect", str(gpt2.path)]) == 0  # the same command without --json: a bar
    assert "loading:" in terminal.getvalue()
