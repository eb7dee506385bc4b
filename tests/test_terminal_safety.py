"""Control characters from outside strings (sysfs, request logs) never reach the terminal raw."""

from __future__ import annotations

import subprocess
import sys

from rdmascope.sampler.faketree import build_device

from rdmascope.textsafe import clean, escape_controls

OSC52 = "\x1b]52;c;ZXZpbA==\x07"  # writes the clipboard
CLEAR = "\x1b[2J"                # clears the screen


def test_escape_controls_shows_every_control_but_newline_tab_and_colours():
    s = f"a{OSC52}b{CLEAR}c\rd\x9be\x7ff\n\tg\x1b[1;31mred\x1b[0m"
    assert escape_controls(s) == ("a\\x1b]52;c;ZXZpbA==\\x07b\\x1b[2Jc\\x0dd\\x9be\\x7ff\n\t"
                                  "g\x1b[1;31mred\x1b[0m")
    assert escape_controls("plain 200 Gb/sec (4X HDR)\n") == "plain 200 Gb/sec (4X HDR)\n"
    assert clean("x\x1b[1mbold\n") == "x\\x1b[1mbold\\x0a"



def test_escape_controls_ascii_shortcut_changes_nothing():
    """Plain ASCII text is passed by a byte check before the search: every character 0-0xff,
    alone and inside ASCII or non-ASCII text, is escaped exactly as the search alone does."""
    from rdmascope.textsafe import _CONTROL, _visible

    for i in range(0x100):
        for s in (chr(i), f"ab{chr(i)}c\n", f"\u00e9{chr(i)}", f"{chr(i)}\x1b[0m x"):
            assert escape_controls(s) == _CONTROL.sub(_visible, s), (i, s)
    assert escape_controls("") == ""

def test_sysfs_strings_reach_the_terminal_escaped(tmp_path):
    """A rate string and firmware version carrying OSC 52 and CSI 2J: `rdmascope devices`
    prints them visibly escaped, in every printer (the real stdout/stderr of the command)."""
    root = tmp_path / "sys"
    dev = build_device(root, "mlx5_0", pci="0000:01:00.0", fw_ver=f"28.1{OSC52}",
                       rate=f"200 Gb/sec (4X HDR){CLEAR}")
    assert dev.exists()
    r = subprocess.run([sys.executable, "-m", "rdmascope", "devices", "--sysfs-root", str(root)],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "\\x1b]52;c;ZXZpbA==\\x07" in out or "\\x1b[2J" in out, out


def test_manifest_strings_reach_the_terminal_escaped(tmp_path):
    """A manifest (an outside file once copied around) whose host and note carry escapes:
    `rdmascope inspect` shows them escaped."""
    from rdmascope.capture import STATUS_OK, CaptureWriter, make_batch

    c = {"source": "infiniband", "device": f"mlx5_0{CLEAR}", "port": 1,
         "name": "port_xmit_data", "path": "/x", "unit": "4 bytes", "bytes_per_unit": 4,
         "width_bits": 64, "direction": "tx"}
    w = CaptureWriter.create(tmp_path / "cap", {"interval_ns": 1_000_000, "counters": [c],
                                                "host": f"node{OSC52}",
                                                "start": {"monotonic_ns": 0, "realtime_ns": 1},
                                                "extra": {"note": f"x{CLEAR}"}})
    w.write_batch(make_batch([0, 0], [0, 1], [10, 1_000_010], [5, 5], [1, 2],
                             [STATUS_OK, STATUS_OK]))
    w.close()
    r = subprocess.run([sys.executable, "-m", "rdmascope", "inspect", str(tmp_path / "cap")],
                       capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "node\\x1b]52;c;ZXZpbA==\\x07" in out


def test_request_log_fields_reach_the_terminal_escaped(tmp_path):
    """A request log's ids and test names carrying OSC 52 and CSI 2J (a log is an outside
    file): `rdmascope attribute` prints them escaped in its tables, never raw."""
    import json
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"
    rows = [json.loads(line) for line in (fixture / "requests.jsonl").read_text().splitlines()
            if line.strip()]
    for r in rows:
        r["request_id"] = f"{r['request_id']}{OSC52}"
        r["test"] = f"{r['test']}{CLEAR}"
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run([sys.executable, "-m", "rdmascope", "attribute", str(fixture),
                        "--requests", str(log)], capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "\\x1b]52;c;ZXZpbA==\\x07" in out  # the request id, shown visibly


def test_json_output_with_outside_controls_parses_to_the_same_strings(tmp_path):
    """`attribute --json` on a request log whose ids carry ESC, DEL and a C1 control: the
    document on stdout holds no raw control byte and parses back to the log's own strings
    (json's ASCII encoder escapes every one, DEL included, as \\u00NN before the terminal
    filter sees them: the filter's \\xNN, which no JSON reader accepts, never appears)."""
    import json
    from pathlib import Path

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "sim-p2-200"
    rows = [json.loads(line) for line in (fixture / "requests.jsonl").read_text().splitlines()
            if line.strip()]
    tail = "\x7f\x1b[2J\x85"
    for r in rows:
        r["request_id"] = f"{r['request_id']}{tail}"
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run([sys.executable, "-m", "rdmascope", "attribute", str(fixture),
                        "--requests", str(log), "--json"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f
                   for c in r.stdout)
    doc = json.loads(r.stdout)
    ids = {row["request_id"] for row in doc["requests"]}
    assert ids == {row["request_id"] for row in rows}, ids
