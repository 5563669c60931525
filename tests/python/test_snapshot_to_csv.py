"""Tests for gpumem.snapshot_to_csv (integrations/python/gpumem/snapshot_to_csv.py, the console
script gpumem-snapshot-to-csv) on synthetic snapshots (standard library only).

The snapshots are built by hand with the structure torch.cuda.memory._dump_snapshot() writes (a
pickled dict with `segments` and `device_traces`). With the environment variable GPUMEM_CLI set to
the built `gpumem` program, ReplayPeakTest also replays the converted trace.
"""
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "integrations", "python", "gpumem", "snapshot_to_csv.py")
_spec = importlib.util.spec_from_file_location("snapshot_to_csv", SCRIPT)
conv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conv)

BASE_US = 1_700_000_000_000_000  # a Unix time in microseconds: 22:13:20 UTC
S1, S2 = 0x5555AAAA0000, 0x5555BBBB0000


def ev(action, addr, size, t, stream=S1):
    e = {"action": action, "size": size, "stream": stream, "time_us": BASE_US + t, "frames": []}
    if action == "oom":
        e["device_free"] = addr
    else:
        e["addr"] = addr
    return e


def snapshot(*device_traces):
    return {"segments": [], "device_traces": [list(t) for t in device_traces],
            "allocator_settings": {}}


class Converter:
    def __init__(self, test):
        self.test = test
        self.dir = tempfile.TemporaryDirectory()
        test.addCleanup(self.dir.cleanup)

    def run(self, snap, *extra, raw=None):
        src = os.path.join(self.dir.name, "snap.pickle")
        with open(src, "wb") as f:
            if raw is not None:
                f.write(raw)
            else:
                pickle.dump(snap, f)
        dst = os.path.join(self.dir.name, "trace.csv")
        if os.path.exists(dst):
            os.remove(dst)
        p = subprocess.run([sys.executable, SCRIPT, src, "-o", dst, *extra],
                           capture_output=True, text=True)
        rows = None
        if os.path.exists(dst):
            with open(dst) as f:
                rows = f.read().splitlines()
        return p, rows, dst


class SnapshotToCsvTest(unittest.TestCase):
    def test_basic_mapping(self):
        snap = snapshot([
            ev("segment_alloc", 0x7000, 2 << 20, 0),
            ev("alloc", 0x7000, 512, 1),
            ev("alloc", 0x7200, 1024, 2, S2),
            ev("free_requested", 0x7000, 512, 3),
            ev("free_completed", 0x7000, 512, 4),
            ev("oom", 123456, 1 << 40, 5),
            ev("free_requested", 0x7200, 1024, 6, S2),
            ev("free_completed", 0x7200, 1024, 7, S2),
            ev("segment_free", 0x7000, 2 << 20, 8),
        ])
        p, rows, _ = Converter(self).run(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rows, [
            "Thread,Time,Action,Pointer,Size,Stream",
            "0,22:13:20.000001,allocate,0x7000,512,0x5555aaaa0000",
            "0,22:13:20.000002,allocate,0x7200,1024,0x5555bbbb0000",
            "0,22:13:20.000004,free,0x7000,512,0x5555aaaa0000",
            "0,22:13:20.000005,allocate failure,0x0,1099511627776,0x5555aaaa0000",
            "0,22:13:20.000007,free,0x7200,1024,0x5555bbbb0000",
        ])
        self.assertNotIn("free_requested", p.stderr)

    def test_time_format(self):
        self.assertEqual(conv._format_time(BASE_US + 3_723_000_042), "23:15:23.000042")
        self.assertEqual(conv._format_time((86400 + 61) * 1_000_000 + 7), "00:01:01.000007")
        self.assertEqual(conv._format_time(None), "")

    def test_address_freed_and_reused(self):
        snap = snapshot([
            ev("alloc", 0x8000, 100, 1),
            ev("free_requested", 0x8000, 100, 2),
            ev("free_completed", 0x8000, 100, 3),
            ev("alloc", 0x8000, 300, 4),
            ev("free_requested", 0x8000, 300, 5),
            ev("free_completed", 0x8000, 300, 6),
            ev("alloc", 0x8000, 200, 7),
        ])
        p, rows, _ = Converter(self).run(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([r.split(",")[2:5] for r in rows[1:]], [
            ["allocate", "0x8000", "100"], ["free", "0x8000", "100"],
            ["allocate", "0x8000", "300"], ["free", "0x8000", "300"],
            ["allocate", "0x8000", "200"]])
        self.assertIn("1 block(s) still live", p.stderr)

    def test_history_started_mid_run(self):
        snap = snapshot([
            ev("free_requested", 0x9000, 64, 1),   # allocated before recording began
            ev("free_completed", 0x9000, 64, 2),
            ev("alloc", 0x9100, 128, 3),
            ev("free_completed", 0x9200, 32, 4),   # another one
            ev("alloc", 0x9000, 256, 5),
            ev("free_completed", 0x9000, 256, 6),
        ])
        p, rows, _ = Converter(self).run(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([r.split(",")[2:5] for r in rows[1:]], [
            ["allocate", "0x9100", "128"], ["allocate", "0x9000", "256"], ["free", "0x9000", "256"]])
        self.assertIn("dropped 3 free entries", p.stderr)

    def test_only_free_requested_is_used_and_said(self):
        snap = snapshot([
            ev("alloc", 0xA000, 1000, 1),
            ev("alloc", 0xB000, 2000, 2),
            ev("free_requested", 0xA000, 1000, 3),
            ev("alloc", 0xC000, 3000, 4),
            ev("alloc", 0xA000, 500, 5),           # reused: the first block's free came at t=3
            ev("free_requested", 0xB000, 2000, 6),  # pending at the snapshot
        ])
        p, rows, _ = Converter(self).run(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([r.split(",")[1:5] for r in rows[1:]], [
            ["22:13:20.000001", "allocate", "0xa000", "1000"],
            ["22:13:20.000002", "allocate", "0xb000", "2000"],
            ["22:13:20.000003", "free", "0xa000", "1000"],
            ["22:13:20.000004", "allocate", "0xc000", "3000"],
            ["22:13:20.000005", "allocate", "0xa000", "500"],
            ["22:13:20.000006", "free", "0xb000", "2000"]])
        self.assertIn("2 block(s) had only a free_requested", p.stderr)

    def test_device_choice(self):
        d0 = [ev("alloc", 0x1000, 10, 1)]
        d1 = [ev("alloc", 0x2000, 20, 1), ev("free_completed", 0x2000, 20, 2)]
        c = Converter(self)
        p, _, _ = c.run(snapshot(d0, d1))
        self.assertEqual(p.returncode, 2)
        self.assertIn("--device", p.stderr)
        p, rows, _ = c.run(snapshot(d0, d1), "--device", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(rows), 3)
        self.assertIn("0x2000", rows[1])
        p, rows, _ = c.run(snapshot([], d1))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("0x2000", rows[1])
        p, _, _ = c.run(snapshot(d0), "--device", "3")
        self.assertEqual(p.returncode, 2)

    def test_refuses_non_builtin_globals(self):
        class Evil:
            def __reduce__(self):
                return (os.system, ("true",))
        raw = pickle.dumps({"segments": [], "device_traces": [[Evil()]]})
        p, rows, _ = Converter(self).run(None, raw=raw)
        self.assertEqual(p.returncode, 2)
        self.assertIn("only builtin", p.stderr)
        self.assertIsNone(rows)

    def test_not_a_snapshot(self):
        c = Converter(self)
        p, _, _ = c.run(None, raw=b"Thread,Time\n")
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a readable pickle", p.stderr)
        p, _, _ = c.run({"something": 1})
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a memory snapshot", p.stderr)


def workload():
    """A deterministic snapshot with a known peak of live bytes (the sum of allocated sizes)."""
    import random
    rng = random.Random(7)
    entries, live, cur, peak, t = [], {}, 0, 0, 0
    next_addr = 0x7F0000000000
    free_addrs = []
    for i in range(3000):
        t += rng.randint(1, 50)
        stream = S1 if rng.random() < 0.7 else S2
        if live and (rng.random() < 0.45 or len(live) > 200):
            addr = rng.choice(sorted(live))
            size, st = live.pop(addr)
            entries.append(ev("free_requested", addr, size, t, st))
            entries.append(ev("free_completed", addr, size, t + 1, st))
            cur -= size
            free_addrs.append(addr)
        else:
            size = rng.choice([512, 4096, 65536, 1 << 20, 3 << 20]) + rng.randint(0, 3) * 512
            if free_addrs and rng.random() < 0.5:
                addr = free_addrs.pop(rng.randrange(len(free_addrs)))   # address reuse
            else:
                addr = next_addr
                next_addr += 8 << 20
            entries.append(ev("alloc", addr, size, t, stream))
            live[addr] = (size, stream)
            cur += size
            peak = max(peak, cur)
        if i % 500 == 0:
            entries.append(ev("segment_alloc", next_addr, 2 << 20, t))
    return snapshot(entries), peak


@unittest.skipUnless(os.environ.get("GPUMEM_CLI"), "GPUMEM_CLI (the built gpumem program) not set")
class ReplayPeakTest(unittest.TestCase):
    def test_replay_peak_live_matches_snapshot(self):
        snap, peak = workload()
        p, rows, dst = Converter(self).run(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        r = subprocess.run([os.environ["GPUMEM_CLI"], "replay", "--json", dst],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        result = json.loads(r.stdout.splitlines()[0])
        self.assertEqual(result["peak_live_bytes"], peak)
        self.assertEqual(result["ops"], len(rows) - 1)
        self.assertEqual(result["failed_allocs"], 0)


if __name__ == "__main__":
    unittest.main()
