"""NCCL INFO logs: the reader (formats of NCCL 2.18-2.30), `rdmascope nccl`, and
`verify-emulation --nccl-log` against emulated captures whose truth is known.

The logs are written from NCCL's own format strings (rdmascope.emulator.nccl_log, see
docs/nccl.md); a few lines are copied by hand in the shapes quoted in public issue threads.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from rdmascope.analysis.nccl import NcclLogError, read_logs

from rdmascope.cli import main
from rdmascope.emulator.nccl_log import NCCL_VERSIONS, NodeLog, format_nccl_log, write_nccl_log

TWINS = ["rocep1s0f1", "roceP2p1s0f1"]


def _one(path):
    log = read_logs([path])
    assert len(log.processes) == 1
    return log, log.processes[0]


@pytest.mark.parametrize("version", NCCL_VERSIONS)
@pytest.mark.parametrize("net_subsys", [True, False])
def test_every_version_one_rail_two_rail_socket(tmp_path, version, net_subsys):
    one = write_nccl_log(tmp_path / "one.log", NodeLog(host="spark-01", version=version,
                         hcas=TWINS[:1], ib_hca_env="rocep1s0f1", net_subsys=net_subsys,
                         n_channels=4))
    log, p = _one(one)
    assert p.version == version and p.network == "IB"
    assert p.opened_hcas == ["rocep1s0f1"]
    # 4 channels, each a send and a receive line, all through the one HCA
    assert p.hcas_carrying() == {"rocep1s0f1": 8}
    assert p.ib_hca_env == "rocep1s0f1" and not log.notes
    two = write_nccl_log(tmp_path / "two.log", NodeLog(host="spark-01", version=version,
                         hcas=TWINS, net_subsys=net_subsys, n_channels=4))
    _, p = _one(two)
    assert sorted(p.opened_hcas) == sorted(TWINS)
    carried = p.hcas_carrying()
    assert sorted(carried) == sorted(TWINS)
    # merged (2.20+): every connection goes through the virtual device of both twins;
    # 2.18/2.19 cannot merge, channels alternate: 4 connections each
    merged = version >= "2.20"
    assert carried == ({h: 8 for h in TWINS} if merged else {h: 4 for h in TWINS})
    sock = write_nccl_log(tmp_path / "sock.log", NodeLog(host="spark-01", version=version,
                          hcas=[], network="Socket"))
    _, p = _one(sock)
    assert p.network == "Socket" and p.ib_no_device and p.hcas_carrying() == {}
    assert p.sockets == {0: ("enp1s0f1np1", "192.168.100.11<0>")}


def test_real_shapes_from_issue_threads(tmp_path):
    # shapes as quoted in ROCm/rccl#419 and NVIDIA/nccl issue threads (2.18-era, 4 IB HCAs)
    text = """\
e05r3n09:929:929 [2] NCCL INFO Bootstrap : Using ib0:11.5.5.50<0>
e05r3n09:929:929 [2] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
e05r3n09:929:929 [2] NCCL INFO NET/IB : Using [0]mlx5_3:1/IB [1]mlx5_2:1/IB [2]mlx5_1:1/IB [3]mlx5_0:1/IB ; OOB ib0:11.5.5.50<0>
e05r3n09:929:929 [2] NCCL INFO Using network IB
e05r3n09:929:1025 [2] NCCL INFO Channel 00/02 :    0   1
e05r3n09:929:1025 [2] NCCL INFO Channel 00/0 : 1[c1000] -> 2[c2000] [receive] via NET/IB/2/GDRDMA
e05r3n09:929:1025 [2] NCCL INFO Channel 01/0 : 2[c2000] -> 3[c3000] [send] via NET/IB/3
e05r3n09:929:1025 [2] NCCL INFO Channel 02 : 2[c2000] -> 0[c0000] via SHM/direct/direct
e05r3n09:929:1025 [2] NCCL INFO Channel 03/0 : 2[2] -> 1[1] via P2P/CUMEM/read
e05r3n09:929:1025 [2] NCCL INFO comm 0x5581e0d2c0 rank 2 nranks 4 cudaDev 2 busId c2000 commId 0x1a2b3c - Init COMPLETE
"""
    f = tmp_path / "rccl.log"
    f.write_text(text)
    log, p = _one(f)
    assert p.opened_hcas == ["mlx5_3", "mlx5_2", "mlx5_1", "mlx5_0"]
    assert p.hcas_carrying() == {"mlx5_1": 1, "mlx5_0": 1}  # NET/IB/2 and NET/IB/3
    assert [c.gdr for c in p.net_channels()] == [True, False]
    assert {c.transport for c in p.channels} == {"NET", "SHM", "P2P"}
    assert p.plugin == "internal"
    comm = p.comms["0x5581e0d2c0"]
    assert (comm.rank, comm.nranks, comm.complete) == (2, 4, True)
    # 2.18 logs no Init START: the channels before the COMPLETE are this communicator's
    assert {c.comm for c in p.channels} == {"0x5581e0d2c0"}


def test_interleaved_ranks_container_prefixes_and_colour(tmp_path):
    a = format_nccl_log(NodeLog(host="spark-01", pid=101, hcas=TWINS[:1], rank=0, nranks=2))
    b = format_nccl_log(NodeLog(host="spark-01", pid=202, hcas=TWINS, rank=1, nranks=2,
                                version="2.21.5"))
    lines = []
    for i in range(max(len(a), len(b))):  # interleave, each under its own launcher prefix
        if i < len(a):
            lines.append(f"(RayWorkerWrapper pid=101, ip=10.0.0.1) \x1b[36m{a[i]}\x1b[0m")
        if i < len(b):
            lines.append(f"2026-12-01T22:00:0{i % 10}.123456789Z worker-1  | {b[i]}")
        lines.append("INFO 12-01 22:00:00 [engine.py:42] some vLLM line, not NCCL's")
    f = tmp_path / "mixed.log"
    f.write_text("\n".join(lines) + "\n")
    log = read_logs([f])
    by_pid = {p.pid: p for p in log.processes}
    assert sorted(by_pid) == [101, 202]
    assert by_pid[101].hcas_carrying() == {"rocep1s0f1": 4}
    assert by_pid[202].version == "2.21.5" and sorted(by_pid[202].hcas_carrying()) == sorted(TWINS)
    assert by_pid[202].times and by_pid[202].times[0].tzinfo is not None  # the ISO stamps
    assert log.unknown_lines >= len(lines) // 3  # the vLLM lines: counted, skipped, not fatal
    assert not log.notes


def test_one_file_per_rank_directory_and_second_communicator(tmp_path):
    d = tmp_path / "logs"
    for r, host in enumerate(["spark-01", "spark-02"]):
        write_nccl_log(d / f"{host}.{1000 + r}", NodeLog(host=host, pid=1000 + r, rank=r,
                       nranks=2, hcas=TWINS[:1], second_comm=True, version="2.30.4"))
    log = read_logs([d])
    assert log.hosts() == ["spark-01", "spark-02"]
    p = log.on_host("spark-02.cluster.local")[0]  # NCCL cuts the host at its first dot
    assert len(p.comms) == 2 and all(c.complete and c.rank == 1 for c in p.comms.values())
    # each communicator has its own 2 channels x (send + receive)
    per_comm = {}
    for c in p.channels:
        per_comm[c.comm] = per_comm.get(c.comm, 0) + 1
    assert sorted(per_comm.values()) == [4, 4] and set(per_comm) == set(p.comms)


def test_bad_input_is_named_never_a_traceback(tmp_path):
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"NCCL INFO\n\x7fELF\x00\x01\x02")
    with pytest.raises(NcclLogError, match=r"core.bin: line 2: not a text file"):
        read_logs([binary])
    other = tmp_path / "vllm.log"
    other.write_text("INFO 12-01 22:00:00 [api_server.py:1] vLLM API server version 0.9\n")
    with pytest.raises(NcclLogError, match=r"vllm.log: line 1: no NCCL log line.*vLLM API"):
        read_logs([other])
    # truncated: the file ends in the middle of the NET/IB : Using line
    lines = format_nccl_log(NodeLog(host="spark-01", hcas=TWINS[:1]))
    cut = next(i for i, ln in enumerate(lines) if "NET/IB : Using" in ln)
    trunc = tmp_path / "cut.log"
    trunc.write_text("\n".join(lines[:cut]) + "\n" + lines[cut][:lines[cut].index("/RoCE") + 3])
    log, p = _one(trunc)
    assert log.notes == [(str(trunc), cut + 1, log.notes[0][2])]
    assert "truncated" in log.notes[0][2] and not p.ib_hcas
    r = CliRunner().invoke(main, ["nccl", str(binary)])
    assert r.exit_code == 4 and "core.bin: line 2: not a text file" in r.output
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)


def test_nccl_command_summary(tmp_path):
    f = write_nccl_log(tmp_path / "a.log", NodeLog(host="spark-01", hcas=TWINS, n_channels=3,
                       version="2.19.3"))
    r = CliRunner().invoke(main, ["nccl", str(f), "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)["processes"][0]
    assert row["version"] == "2.19.3" and row["network"] == "IB" and row["gdrdma"] == "on"
    # 2.19 cannot merge: channels 0, 2 through twin 0 and channel 1 through twin 1, x2 lines
    assert row["connections_per_hca"] == "roceP2p1s0f1=2 rocep1s0f1=4"
    assert row["channels_per_hca"] == "roceP2p1s0f1=1 rocep1s0f1=2"
    assert row["hcas_opened"] == "rocep1s0f1:1/RoCE roceP2p1s0f1:1/RoCE"
    assert row["comms"] == "rank 0/2 on 2 nodes"


# ----- two witnesses against emulated captures --------------------------------------------------

@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    from rdmascope.emulator.model import TrafficConfig, link_config, simulate, test_plan_scenario
    from rdmascope.emulator.simcapture import simulate_capture

    out = tmp_path_factory.mktemp("nccl-caps")
    sc = test_plan_scenario(["P1"], rounds=1, warmup=False, output_tokens=16, idle_gap_s=0.5,
                            lead_in_s=0.3, tail_s=0.3)
    caps = {}
    for link in ("emulated100", "200"):
        caps[link] = simulate_capture(out / link, simulate(sc, TrafficConfig(link=link_config(link)),
                                                           seed=2))
    return caps


def _verify(cap, log, *extra):
    return CliRunner().invoke(main, ["verify-emulation", str(cap), "--nccl-log", str(log), "--json",
                                     *extra])


def _log(tmp_path, cap, name, **kw):
    m = json.loads((cap / "manifest.json").read_text())
    kw.setdefault("host", m["host"])
    kw.setdefault("timestamps", True)
    kw.setdefault("t_realtime_ns", m["start"]["realtime_ns"] + 200_000_000)
    return write_nccl_log(tmp_path / name, NodeLog(**kw))


@pytest.mark.parametrize("version", ["2.18.6", "2.23.4", "2.27.7", "2.30.4"])
def test_verdicts_single(tmp_path, captures, version):
    emu, full = captures["emulated100"], captures["200"]
    one = _log(tmp_path, emu, "one.log", hcas=TWINS[:1], ib_hca_env="rocep1s0f1", version=version,
               second_comm=True)  # a second communicator on the same HCA changes nothing
    r = _verify(emu, one)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 0 and w["status"] == "pass", r.output
    assert w["log_hcas"] == ["rocep1s0f1"] == w["counter_hcas"]
    # NCCL opened both twins, yet one carried all: the disagreement, named, exit 1
    two = _log(tmp_path, emu, "two.log", hcas=TWINS, version=version)
    r = _verify(emu, two)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 1 and w["status"] == "fail" and "disagreement" in w["message"]
    assert sorted(w["log_hcas"]) == sorted(TWINS) and w["counter_hcas"] == ["rocep1s0f1"]
    # the other way round: the log says one HCA, the counters saw both (a log of another run)
    r = _verify(full, _log(tmp_path, full, "one-full.log", hcas=TWINS[:1], version=version))
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 1 and "rocep1s0f1 only" in w["message"]
    assert sorted(w["counter_hcas"]) == sorted(TWINS)


def test_verdicts_both_socket_host_time(tmp_path, captures):
    emu, full = captures["emulated100"], captures["200"]
    r = _verify(full, _log(tmp_path, full, "two.log", hcas=TWINS), "--expect-both")
    assert r.exit_code == 0 and json.loads(r.output)["meta"]["nccl_witness"]["status"] == "pass", r.output
    # 2.25 with the default subsystems: no 'Made virtual device' line; NET/IB/2 past the two
    # HCAs can only be both twins merged
    r = _verify(full, _log(tmp_path, full, "two-nonet.log", hcas=TWINS, version="2.25.1",
                           net_subsys=False), "--expect-both")
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 0 and sorted(w["log_hcas"]) == sorted(TWINS), r.output
    r = _verify(full, _log(tmp_path, full, "one.log", hcas=TWINS[:1]), "--expect-both")
    assert r.exit_code == 1 and "expected both twins" in json.loads(r.output)["meta"]["nccl_witness"]["message"]
    # NET/Socket: TCP named from the log, whatever the counters say (here: all on RDMA)
    r = _verify(emu, _log(tmp_path, emu, "sock.log", hcas=[], network="Socket"))
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 1 and w["network"] == "Socket" and "NET/Socket (TCP" in w["message"]
    # another host's log: cannot witness this capture
    r = _verify(emu, _log(tmp_path, emu, "other.log", host="spark-07", hcas=TWINS[:1]))
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 3 and "spark-07" in w["message"] and "cannot witness" in w["message"]
    # a day earlier, communicators closed then: a log of another run
    m = json.loads((emu / "manifest.json").read_text())
    day = 86_400 * 10**9
    t0 = m["start"]["realtime_ns"]
    r = _verify(emu, _log(tmp_path, emu, "old.log", hcas=TWINS[:1], t_realtime_ns=t0 - day,
                          t_end_realtime_ns=t0 - day + 60 * 10**9))
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 3 and "closed every communicator" in w["message"]
    assert "another run" in w["message"]
    # a day later: it starts after the capture ended
    r = _verify(emu, _log(tmp_path, emu, "late.log", hcas=TWINS[:1], t_realtime_ns=t0 + day))
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 3 and "after the capture" in w["message"]
    # set up an hour before the recording and never closed (a server): judged, with a note
    r = _verify(emu, _log(tmp_path, emu, "server.log", hcas=TWINS[:1],
                          t_realtime_ns=t0 - 3600 * 10**9))
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 0 and any("before the recording" in n for n in w["notes"])
    # no timestamps: judged, with a note that the run is not checked
    r = _verify(emu, _log(tmp_path, emu, "nots.log", hcas=TWINS[:1], timestamps=False))
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 0 and any("no timestamps" in n for n in w["notes"])


def test_log_without_network_lines_gives_no_verdict(tmp_path, captures):
    emu = captures["emulated100"]
    m = json.loads((emu / "manifest.json").read_text())
    f = tmp_path / "warn-only.log"
    f.write_text(f"{m['host']}:77:77 [0] NCCL INFO NCCL version 2.27.7+cuda12.9\n"
                 f"{m['host']}:77:77 [0] NCCL INFO cudaDriverVersion 13000\n")
    r = _verify(emu, f)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 3 and "says nothing" in w["message"]


def test_merged_braces_map_net_devices_by_position(tmp_path):
    # 2.20-2.23: merged NICs in braces, an unmerged one printed with its HCA index (2); the
    # NET device index of a channel is the entry's position (1 for mlx5_2)
    f = tmp_path / "m.log"
    f.write_text(
        "h1:9:9 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_0:1/RoCE, [1] mlx5_1:1/RoCE} "
        "[2]mlx5_2:1/IB [RO]; OOB eth0:10.0.0.1<0>\n"
        "h1:9:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1/GDRDMA(PCI)/Shared\n"
        "h1:9:9 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/0(3)/GDRDMA\n")
    _, p = _one(f)
    assert p.opened_hcas == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert p.hcas_carrying() == {"mlx5_2": 1, "mlx5_0": 1, "mlx5_1": 1}
    assert p.ib_hcas[2] == ("mlx5_2", 1, "IB") and p.relaxed_ordering


def test_a_rank_without_nccl_ib_hca_on_the_emulated_host(tmp_path, captures):
    # two processes on the capture's host: one restricted to the first twin, one not (it did
    # not get NCCL_IB_HCA): the log names both twins, the counters one -> the disagreement
    emu = captures["emulated100"]
    m = json.loads((emu / "manifest.json").read_text())
    t = m["start"]["realtime_ns"] + 200_000_000
    a = format_nccl_log(NodeLog(host=m["host"], pid=11, hcas=TWINS[:1], ib_hca_env="rocep1s0f1",
                                timestamps=True, t_realtime_ns=t))
    b = format_nccl_log(NodeLog(host=m["host"], pid=12, hcas=TWINS, timestamps=True,
                                t_realtime_ns=t, rank=1))
    f = tmp_path / "ranks.log"
    f.write_text("\n".join(x for pair in zip(a, b, strict=False) for x in pair) + "\n")
    r = _verify(emu, f)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 1 and sorted(w["processes"]) == [f"{m['host']}:11", f"{m['host']}:12"]
    assert sorted(w["log_hcas"]) == sorted(TWINS) and w["counter_hcas"] == ["rocep1s0f1"]


def test_cluster_per_node(tmp_path):
    out = tmp_path / "cl"
    r = CliRunner().invoke(main, ["simulate", "capture", "-o", str(out), "--nodes", "2",
                                  "--link", "emulated100", "--not-emulated", "2",
                                  "--scenario", "P1", "--rounds", "1", "--output-tokens", "8"])
    assert r.exit_code == 0, r.output
    logs = [str(out / h / "nccl") for h in ("spark-01", "spark-02")]
    r = CliRunner().invoke(main, ["cluster", str(out), "--expect-single", "--json",
                                  *[x for lg in logs for x in ("--nccl-log", lg)]])
    meta = json.loads(r.output[r.output.index("{"):])["meta"]
    w = meta["nccl_witness"]
    # the not-emulated node's log names both twins (the emulator's truth), as its counters do
    assert w["spark-01"]["status"] == "pass" and w["spark-02"]["status"] == "fail"
    assert sorted(w["spark-02"]["log_hcas"]) == sorted(TWINS)
    assert r.exit_code == 1 and meta["verdict"] == "FAIL"
    # the cluster report: one line per node, the not-emulated one named as such
    r = CliRunner().invoke(main, ["report", str(out / "spark-01"), str(out / "spark-02"), "-o",
                                  str(tmp_path / "rep")])
    assert r.exit_code in (0, 1) and "Traceback" not in r.output, r.output  # 1: a node FAILs
    html = (tmp_path / "rep" / "report.html").read_text()
    # (the report takes the expectation from the set: 1 of 2 emulated; each node is judged
    # beside its own log under it)
    assert "spark-01: NCCL&#39;s log" in html and "spark-02: NCCL&#39;s log" in html


def test_writer_lines_are_nccls_format_strings():
    # spelled out by hand from the format strings (init.cc, net_ib, net.cc): the writer used by
    # the tests must not drift into a shape only this reader knows
    lines = format_nccl_log(NodeLog(host="spark-01.lan", version="2.21.5", hcas=TWINS, pid=7))
    assert "spark-01:7:7 [0] NCCL INFO NET/IB : Using [0]={[0] rocep1s0f1:1/RoCE, [1] " \
           "roceP2p1s0f1:1/RoCE} [RO]; OOB enp1s0f1np1:192.168.100.11<0>" in lines
    assert "spark-01:7:8 [0] NCCL INFO ncclCommInitRank comm 0x55d0c0a11000 rank 0 nranks 2 " \
           "cudaDev 0 nvmlDev 0 busId f000 commId 0x4c5e1d2a9b7f3e01 - Init START" in lines
    old = format_nccl_log(NodeLog(host="spark-01", version="2.18.6", hcas=TWINS[:1], pid=7))
    assert "spark-01:7:8 [0] NCCL INFO Channel 00/0 : 1[f000] -> 0[f000] [receive] via " \
           "NET/IB/0/GDRDMA" in old
    assert not any("Init START" in x for x in old)  # 2.18 logs only COMPLETE
    new = format_nccl_log(NodeLog(host="spark-01", version="2.30.4", hcas=TWINS, pid=7))
    assert "spark-01:7:8 [0] NCCL INFO NET/IB : Made virtual device [2] " \
           "name=rocep1s0f1+roceP2p1s0f1 speed=200000 ndevs=2 rail=-1 plane=3" in new


def test_serve_output_without_a_manifest(tmp_path):
    # simulate serve: truth.json only (the recorder writes the manifest): this machine's clocks
    import socket

    from rdmascope.emulator.model import TrafficConfig, link_config, simulate, test_plan_scenario
    from rdmascope.emulator.nccl_log import write_witnesses
    from rdmascope.emulator.simcapture import write_ground_truth

    sc = test_plan_scenario(["P1"], rounds=1, warmup=False, output_tokens=4, idle_gap_s=0.2,
                            lead_in_s=0.1, tail_s=0.1)
    tr = simulate(sc, TrafficConfig(link=link_config("200", tcp_fallback=True)), seed=1)
    write_ground_truth(tmp_path, tr, 10**9)
    w = write_witnesses(tmp_path, tr)
    assert "inspector" in w  # NCCL records the collectives whatever the transport
    log, p = _one(w["log"])
    assert p.host == socket.gethostname().split(".")[0] and p.network == "Socket"


def test_traffic_on_the_wrong_twin(tmp_path, captures):
    # the log says NCCL used the second twin, the counters saw the first carry everything
    emu = captures["emulated100"]
    f = _log(tmp_path, emu, "wrong.log", hcas=["roceP2p1s0f1"], ib_hca_env="roceP2p1s0f1")
    r = _verify(emu, f)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 1 and w["log_hcas"] == ["roceP2p1s0f1"]
    assert w["counter_hcas"] == ["rocep1s0f1"] and "roceP2p1s0f1 only" in w["message"]


def test_opened_both_but_used_one(tmp_path, captures):
    # NET/IB : Using lists both twins, every channel goes through the first, the counters agree
    # with the channels: an HCA opened but unused is still not the one-HCA emulation
    emu = captures["emulated100"]
    f = _log(tmp_path, emu, "opened.log", hcas=TWINS, merge=False, channel_devs=[0],
             version="2.19.3")
    r = _verify(emu, f)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 1 and w["log_hcas"] == ["rocep1s0f1"]
    assert sorted(w["log_opened"]) == sorted(TWINS) and "opened but unused" in w["message"]


def test_a_channel_through_an_unlogged_device_gives_no_verdict(tmp_path, captures):
    # 4 HCAs opened, a channel through NET device 5, no 'Made virtual device' line: which HCAs
    # device 5 merges is unknown, so no verdict from a partial picture
    emu = captures["emulated100"]
    m = json.loads((emu / "manifest.json").read_text())
    h = m["host"]
    f = tmp_path / "vdev.log"
    f.write_text(
        f"{h}:5:5 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE "
        f"[2]mlx5_2:1/RoCE [3]mlx5_3:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n"
        f"{h}:5:5 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
        f"{h}:5:5 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/5/GDRDMA\n")
    r = _verify(emu, f)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 3 and "NET/IB/5" in w["message"]


LAUNCHER_PREFIXES = {
    "torchrun": "[default0]:",          # torchrun --tee 3: [<role><local rank>]:
    "mpirun": "[1,0]<stdout>:",          # mpirun --tag-output: [jobid,rank]<stream>:
    "srun": "0: ",                       # srun -l: task number, colon, blank
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHER_PREFIXES))
def test_launcher_prefixes(tmp_path, captures, launcher):
    # torchrun and mpirun glue their tag to NCCL's host with a ':' ('[default0]:spark-01:42:42
    # [0] NCCL INFO ...'): every line was skipped, so the file read as 'no NCCL log line'
    pre = LAUNCHER_PREFIXES[launcher]
    emu = captures["emulated100"]
    m = json.loads((emu / "manifest.json").read_text())
    lines = format_nccl_log(NodeLog(host=m["host"], pid=31, hcas=TWINS[:1],
                                    ib_hca_env="rocep1s0f1", timestamps=False))
    assert lines[0].startswith(f"{m['host']}:31:31 [0] NCCL INFO")
    f = tmp_path / f"{launcher}.log"
    f.write_text("".join(f"{pre}{ln}\n" for ln in lines))
    r = CliRunner().invoke(main, ["nccl", str(f), "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["processes"]
    assert len(rows) == 1 and rows[0]["host"] == m["host"] and rows[0]["pid"] == 31, rows
    assert rows[0]["network"] == "IB" and rows[0]["hcas_opened"] == "rocep1s0f1:1/RoCE"
    r = _verify(emu, f)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 0 and w["status"] == "pass", r.output
    assert w["log_hcas"] == ["rocep1s0f1"] == w["counter_hcas"]
    # with NCCL's own timestamp (2.26+) between the launcher's tag and the host: the times count
    t = m["start"]["realtime_ns"] + 200_000_000
    both = format_nccl_log(NodeLog(host=m["host"], pid=32, hcas=TWINS, timestamps=True,
                                   t_realtime_ns=t))
    g = tmp_path / f"{launcher}-ts.log"
    g.write_text("".join(f"{pre}{ln}\n" for ln in both))
    log = read_logs([g])
    assert [p.pid for p in log.processes] == [32] and log.processes[0].times
    r = _verify(emu, g)
    w = json.loads(r.output)["meta"]["nccl_witness"]
    assert r.exit_code == 1 and "disagreement" in w["message"], r.output
