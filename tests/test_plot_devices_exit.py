"""``plot devices`` draws the emulation check's verdict on the figure: it exits with it, as
every command that shows a verdict (README's exit codes: 1 whenever a FAIL is shown). Before,
it exited 0 with a "labelled emulated, but BOTH interfaces carried traffic" cross drawn."""

from __future__ import annotations

from click.testing import CliRunner

from rdmascope.cli import main


def _sim(tmp_path, name, link):
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(tmp_path / name),
                                  "--scenario", "single4k", "--link", link])
    assert r.exit_code == 0, r.output
    return str(tmp_path / name)


def test_plot_devices_exits_with_the_verdict_it_draws(tmp_path):
    both = _sim(tmp_path, "both", "200")
    one = _sim(tmp_path, "one", "emulated100")
    fail = CliRunner().invoke(main, ["plot", "devices", both, "--label", "emulated 100 Gb/s",
                                     "-o", str(tmp_path / "f.png")])
    assert fail.exit_code == 1, fail.output  # both twins carried it: the emulation did not take
    assert (tmp_path / "f.png").is_file()  # the figure is still written
    ok = CliRunner().invoke(main, ["plot", "devices", one, "--label", "emulated 100 Gb/s",
                                   "-o", str(tmp_path / "o.png")])
    assert ok.exit_code == 0, ok.output
    full = CliRunner().invoke(main, ["plot", "devices", both, "-o", str(tmp_path / "b.png")])
    assert full.exit_code == 0, full.output  # the full link, not labelled emulated: PASS
