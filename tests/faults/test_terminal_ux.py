"""Kind 7: the recorder tells the person at the terminal.

One recording: inspect while it runs says "BEING RECORDED by pid N" (not UNCLEAN END); a device
that vanishes is said once, live, per counter with the reason; sampling ``hw_counters/*`` at
1 ms says they refresh only every ``lifespan`` ms; after a clean stop inspect says neither.
"""

from __future__ import annotations

import shutil
import signal
import time

from .conftest import Recorder, inspect_json, make_tree, run_cli


def test_live_messages_and_inspect_of_a_running_capture(tmp_path):
    tree = make_tree(tmp_path / "sys")
    hw = tree.device_dir("mlx5_0") / "ports" / "1" / "hw_counters"
    hw.mkdir()
    (hw / "out_of_sequence").write_text("0\n")
    (hw / "lifespan").write_text("10\n")
    rec = Recorder(tmp_path / "cap", tree.root, "--duration", "20s",
                   "--counters", "hw_counters/out_of_sequence")
    try:
        rec.wait_sampling()
        res = run_cli("inspect", tmp_path / "cap")
        assert res.exit_code == 0, res.output
        assert f"BEING RECORDED by pid {rec.pid}" in res.output
        assert "UNCLEAN END" not in res.output
        assert inspect_json(tmp_path / "cap")["recording_pid"] == rec.pid
        shutil.rmtree(tree.device_dir("mlx5_1"))
        rec.wait_for(lambda: "mlx5_1/1 port_rcv_data unavailable" in rec.stderr, 10,
                     "the vanished device said live")
        time.sleep(1.5)  # more re-open attempts: still said once
        rec.proc.send_signal(signal.SIGINT)
        assert rec.wait() == 0
    finally:
        rec.kill()
    err = rec.stderr
    for name in ("port_xmit_data", "port_rcv_data"):
        lines = [ln for ln in err.splitlines()
                 if ln.startswith(f"rdmascope record: mlx5_1/1 {name} unavailable: missing:")]
        assert len(lines) == 1, err
    assert "hw_counters (out_of_sequence) are cached by the kernel for hw_counters/lifespan ms" \
        in err
    res = run_cli("inspect", tmp_path / "cap")
    assert "BEING RECORDED" not in res.output and "UNCLEAN END" not in res.output
