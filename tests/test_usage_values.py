"""An option value that names something absent, and options that contradict, are usage errors
(exit 2, ``rdmascope.exitcodes``): "Invalid value for '--OPTION'" with the values there are,
even when only the data shows it (``--run 5`` of a log of one run), never exit 4 (a file's
problem) and never silently ignored. Every command with such an option is here."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from rdmascope.sampler.faketree import build_device

from rdmascope.cli import main, refuse_both_ways
from rdmascope.exitcodes import EXIT_USAGE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIM = FIXTURES / "sim-p2-200"
EMU = FIXTURES / "sim-p2-emulated100"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def runs_in(log: Path) -> int:
    """Runs the fixture's log holds, counted from the file (native: one run per file)."""
    return len({json.loads(line).get("run", 1) for line in log.read_text().splitlines()
                if line.strip()})


@pytest.fixture(scope="module")
def run_set(two_node_run_set):
    return two_node_run_set  # conftest: two emulated hosts and the client's log


def assert_usage(r, option: str, *says: str) -> None:
    assert r.exit_code == EXIT_USAGE, r.output
    assert f"Invalid value for '{option}'" in r.output, r.output
    for s in says:
        assert s in r.output, (s, r.output)
    assert "Traceback" not in r.output


@pytest.mark.parametrize("cmd, option", [
    (["attribute", SIM, "--run", "5"], "--run"),
    (["report", SIM, "--run", "5", "-o", "{tmp}/r"], "--run"),
    (["compare", SIM, EMU, "--run-a", "5"], "--run-a"),
    (["compare", SIM, EMU, "--run-b", "5"], "--run-b"),
])
def test_a_run_the_log_does_not_hold_is_a_usage_error(cmd, option, tmp_path):
    n = runs_in(SIM / "requests.jsonl")
    assert n == 1
    r = run(*[str(a).format(tmp=tmp_path) for a in cmd])
    assert_usage(r, option, "run 5 does not exist", f"holds {n} run (expected 1)",
                 "requests.jsonl")
    assert not (tmp_path / "r").exists()


def test_a_run_the_log_does_not_hold_on_a_run_set_is_one_usage_error(run_set):
    caps = sorted(p for p in run_set.iterdir() if (p / "manifest.json").exists())
    r = run("attribute", *caps, "--run", "3")
    assert r.exit_code == EXIT_USAGE, r.output  # every node refused the same command line
    assert "run 3 does not exist" in r.output and "'--run'" in r.output


@pytest.mark.parametrize("cmd, option, says", [
    (["plot", "request", SIM, "--request-id", "NOPE"], "--request-id", "known (1): P2-r1-0"),
    (["plot", "windows", SIM, "--request-id", "NOPE"], "--request-id", "known (1): P2-r1-0"),
    (["plot", "compare", SIM, EMU, "--test", "NOPE"], "--test", "tests: P2"),
])
def test_plot_naming_an_absent_request_or_test_is_a_usage_error(cmd, option, says, tmp_path):
    ids = [json.loads(x)["request_id"] for x in (SIM / "requests.jsonl").read_text().split("\n")
           if x.strip()]
    assert ids == ["P2-r1-0"]  # what the message must list
    r = run(*cmd, "-o", tmp_path / "x.png")
    assert_usage(r, option, "'NOPE'", says)
    assert not (tmp_path / "x.png").exists()


def test_an_absent_reference_host_is_a_usage_error_naming_the_hosts(run_set):
    hosts = sorted(json.loads((p / "manifest.json").read_text())["host"]
                   for p in run_set.iterdir() if (p / "manifest.json").exists())
    for cmd in (["cluster", run_set], ["compare", run_set, run_set]):
        r = run(*cmd, "--reference", "nope")
        assert_usage(r, "--reference", "'nope'", f"hosts: {', '.join(hosts)}")


def test_cluster_format_names_the_formats():
    r = run("cluster", SIM, EMU, "--format", "bogus")
    assert r.exit_code == EXIT_USAGE and "'--format'" in r.output and "'vllm'" in r.output


def test_request_formats_of_the_cli_are_the_readers():
    from rdmascope.analysis.requestlogs.formats import FORMATS

    from rdmascope.cli.shared import REQUEST_FORMATS

    assert sorted(REQUEST_FORMATS) == sorted(FORMATS)


@pytest.mark.parametrize("n", [0, 2, 65])
def test_demo_nodes_outside_its_values_is_a_usage_error(n):
    r = run("demo", "--nodes", n)
    assert_usage(r, "--nodes", f"{n} is not 1", "3<=x<=64")


@pytest.mark.parametrize("args, option, says", [
    (["--counters", "bogus"], "--counters", "counters there: "),
    (["--netdev", "nope0"], "--netdev", "interfaces: "),
    (["--device", "nope0"], "--device", "available: rocep1s0f1"),
])
def test_record_naming_an_absent_counter_netdev_or_device_is_a_usage_error(tmp_path, args,
                                                                           option, says):
    root = tmp_path / "sys"
    build_device(root, "rocep1s0f1", pci="0000:01:00.1", netdev="enp1s0f1np1")
    out = tmp_path / "cap"
    r = run("record", "-o", out, "--sysfs-root", root, "--no-status", "--duration", "1s", *args)
    assert_usage(r, option, says)
    assert not out.exists()


@pytest.mark.parametrize("kw, says", [
    ({"interval_ns": 50_000}, "--interval 0.05 ms is outside the allowed range 0.1 ms .. 1 s"),
    ({"interval_ns": 2_000_000_000}, "--interval 2000 ms is outside the allowed range"),
    ({"duration_s": 0.0}, "--duration must be positive, got 0 s"),
])
def test_the_recorders_own_range_checks_are_usage_errors(tmp_path, kw, says):
    """``record()`` called without the CLI (its option checks) refuses an out-of-range
    --interval/--duration as ``RecordUsageError`` (the CLI's exit 2), before touching disk."""
    from rdmascope.sampler.daemon import RecordOptions, RecordUsageError, record

    out = tmp_path / "cap"
    with pytest.raises(RecordUsageError) as e:
        record(RecordOptions(output=out, sysfs_root=tmp_path, **kw))
    assert says in str(e.value)
    assert not out.exists()


def test_record_interval_and_duration_out_of_range_are_usage_errors(tmp_path):
    for args, option in ((["--interval", "50us"], "--interval"),
                         (["--interval", "2s"], "--interval"),
                         (["--duration", "0s"], "--duration")):
        r = run("record", "-o", tmp_path / "cap", "--sysfs-root", tmp_path, "--no-status", *args)
        assert_usage(r, option)
        assert not (tmp_path / "cap").exists()


@pytest.mark.parametrize("cmd", [
    ["verify-emulation", SIM, "--expect-single", "--expect-both"],
    ["verify-emulation", SIM, "--expect-both", "--expect-single"],
    ["cluster", SIM, EMU, "--expect-single", "--expect-both"],
    ["cluster", SIM, EMU, "--refine", "--no-refine"],
    ["record", "-o", "{tmp}/c", "--status", "--no-status"],
    ["simulate", "capture", "-o", "{tmp}/c", "--enable-chunked-prefill",
     "--no-enable-chunked-prefill"],
])
def test_both_sides_of_an_on_off_flag_are_refused(cmd, tmp_path):
    r = run(*[str(a).format(tmp=tmp_path) for a in cmd])
    assert r.exit_code == EXIT_USAGE, r.output
    on, off = [a for a in cmd if str(a).startswith("--") and "status" in a or "expect" in str(a)
               or "refine" in str(a) or "chunked" in str(a)]
    assert f"{on} and {off} contradict each other" in r.output, r.output
    assert not (tmp_path / "c").exists()


def test_a_flag_word_as_an_options_value_is_no_flag():
    cmd = click.Command("x", params=[click.Option(["--label"]),
                                     click.Option(["--refine/--no-refine"], default=True)])
    refuse_both_ways(cmd, ["--label", "--no-refine", "--refine"])  # a label, then one flag
    refuse_both_ways(cmd, ["--refine", "--", "--no-refine"])  # after -- nothing is an option
    with pytest.raises(click.UsageError):
        refuse_both_ways(cmd, ["--refine", "--label", "x", "--no-refine"])


@pytest.mark.parametrize("cmd, says", [
    (["verify-emulation", SIM, "--expect-rails", "2", "--expect-single"],
     "--expect-rails N replaces --expect-single/--expect-both"),
    (["cluster", SIM, EMU, "--no-refine", "--max-clock-error", "50ms"],
     "goes with --refine, not --no-refine"),
    (["simulate", "capture", "-o", "{tmp}/c", "--clock-error", "5ms"],
     "--clock-error goes with --nodes N"),
    (["simulate", "capture", "-o", "{tmp}/c", "--nodes", "2", "--straggle", "5ms"],
     "--straggle goes with --straggler N"),
    (["simulate", "capture", "-o", "{tmp}/c", "--dp", "2"], "go with --layout ep"),
    (["simulate", "capture", "-o", "{tmp}/c", "--rails-before", "2"], "go with --rails N"),
    (["simulate", "capture", "-o", "{tmp}/c", "--preset", "glm-5", "--config", SIM / "truth.json"],
     "give one model"),
    (["estimate", "--rails", "2"], "--rails goes with --layout ep"),
    (["estimate", "--all2all-backend", "naive"], "--all2all-backend goes with --layout ep"),
    (["plot", "request", SIM, "--test", "P2", "-o", "{tmp}/c.png"],
     "--test applies to `plot compare` only, not `plot request`"),
    (["plot", "compare", SIM, EMU, "--request-id", "P2-r1-0", "-o", "{tmp}/c.png"],
     "--request-id applies to `plot request` and `plot windows`, not `plot compare`"),
    (["plot", "compare", SIM, EMU, "--zoom", "10ms", "-o", "{tmp}/c.png"],
     "--zoom applies to"),
    (["plot", "request", SIM, "--windows", "1ms", "-o", "{tmp}/c.png"],
     "--windows applies to `plot windows` only"),
    (["plot", "devices", SIM, "--ttft", "1", "-o", "{tmp}/c.png"],
     "--ttft applies to `plot tp` only"),
])
def test_an_option_that_goes_with_another_is_refused_without_it(cmd, says, tmp_path):
    r = run(*[str(a).format(tmp=tmp_path) for a in cmd])
    assert r.exit_code == EXIT_USAGE, r.output
    assert says in r.output and "Traceback" not in r.output
    assert not list(tmp_path.iterdir())  # refused before any work
