"""scripts/results_md.py: runs stored under bench/results/ become bench/RESULTS.md, bad input is
refused with file and line, and --check tells a stale file from a current one."""
import contextlib
import io
import json
import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import results_md  # noqa: E402

HEADER = {"record": "run", "device": "NVIDIA Test GPU", "commit": "abc1234", "date": "2030-01-02",
          "command": "gpumem bench all --rounds 2"}


def rec(pattern, allocator, value, **extra):
    key = results_md.FIGURE_KEYS[pattern]
    return {"pattern": pattern, "allocator": allocator, "device": "gpu", key: value, "reps": 3, **extra}


RECORDS = [
    rec("pair", "gpumem-gpu", 12.0, size_bytes=512, round=1),            # a round's own line: not a figure
    rec("pair", "gpumem-gpu", 13.0, size_bytes=512, rounds=2, round_values=[13.0, 14.0]),
    rec("pair", "cub-caching", 390.0, size_bytes=512, rounds=2, round_values=[390.0, 391.0]),
    rec("pair", "cuda-malloc-async", 650.0, size_bytes=512, rounds=2, round_values=[650.0, 651.0]),
    rec("threads", "gpumem-gpu", 600.0, threads=16, rounds=2, peak_reserved_over_live=4.3,
        granules_moved=900, driver_granules=800, pool_options="grow_before_reclaim=1"),
    rec("threads", "cub-caching", 2.0, threads=16, rounds=2),
    rec("replay-warm", "gpumem-gpu", 28.0, trace="bert.csv.gz", rounds=2, peak_reserved_over_live=1.431),
    {"pattern": "churn", "allocator": "cub-caching", "device": "gpu", "error": "out of memory", "rounds": 2},
]


def write(folder, name, lines):
    path = pathlib.Path(folder) / name
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        rc = fn(*args)
    return rc, err.getvalue()


class ResultsMd(unittest.TestCase):
    def test_a_run_becomes_tables(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, "test.jsonl", [HEADER] + RECORDS)
            text = results_md.render(pathlib.Path(d))
        self.assertIn("## NVIDIA Test GPU", text)
        self.assertIn("### `abc1234`", text)
        self.assertIn("Command: `gpumem bench all --rounds 2`", text)
        self.assertIn("then the median of 2 rounds", text)
        self.assertIn("`grow_before_reclaim=1`", text)
        # The merged line (13.0), not the round's own (12.0); best peer CUB: 390 / 13 = 30.0x.
        self.assertIn("| 512 B | 13.0 | 390 | 650 | 30.0x (cub-caching) |", text)
        self.assertNotIn("| 12.0 |", text)
        # Mops/s: higher is better, so the ratio is gpumem over the best peer.
        self.assertIn("| 16 threads | 600 | 2.00 |  | 300.0x (cub-caching) |", text)
        self.assertIn("| bert.csv.gz, warm | 28.0 |", text)
        self.assertIn("| threads 16 (gpumem-gpu) | 4.300 | 900 | 800 |", text)
        self.assertIn("- cub-caching, churn: out of memory", text)

    def test_goals_and_granules_of_a_newer_run(self):
        goals = [
            {"pattern": "goal", "goal": "reserve", "what": "bert.csv.gz: peak reserved / peak live",
             "allocator": "gpumem-gpu", "device": "gpu", "param": "bert.csv.gz", "value": 1.0182, "unit": "x",
             "compare": "<=", "bound": 1.03, "met": True},
            {"pattern": "goal", "goal": "threads_mops", "what": "16 threads: Mops/s", "allocator": "gpumem-gpu",
             "device": "gpu", "value": 12.5, "unit": "Mops/s", "compare": ">=", "bound": 50, "met": False},
            {"pattern": "goal", "goal": "first_pass_vs_async", "what": "bert.csv.gz: first-pass ns/op / "
             "cudaMallocAsync's", "allocator": "gpumem-gpu", "device": "gpu", "unit": "x", "compare": "<=",
             "bound": 0.7, "met": None, "note": "no cudaMallocAsync in this run"},
        ]
        newer = [rec("replay", "gpumem-gpu", 900.0, trace="bert.csv.gz", peak_reserved_over_live=1.015,
                     granules_moved=10, driver_granules=9, peak_granules=700, driver_maps=800),
                 rec("replay-warm", "gpumem-gpu", 30.0, trace="bert.csv.gz", peak_reserved_over_live=1.0182,
                     granules_moved=2, driver_granules=1, peak_granules=700, passes=2),
                 rec("replay", "cuda-malloc-async", 700.0, trace="bert.csv.gz", peak_reserved_over_live=1.272)]
        with tempfile.TemporaryDirectory() as d:
            write(d, "test.jsonl", [HEADER] + newer + goals)
            text = results_md.render(pathlib.Path(d))
        self.assertIn("then the median of the 2 warm passes after it", text)
        self.assertIn("| bert.csv.gz, first pass (gpumem-gpu) | 1.015 | 10 | 9 | 700 | 800 |", text)
        self.assertIn("| bert.csv.gz, first pass (cuda-malloc-async) | 1.272 | – | – |  |  |", text)
        self.assertIn("**Goals of the default** (gpumem-gpu): 1 of 2 met, 1 not measured", text)
        self.assertIn("| bert.csv.gz: peak reserved / peak live | 1.018 | <= 1.03 x | met |", text)
        self.assertIn("| 16 threads: Mops/s | 12.5 | >= 50 Mops/s | **not met** |", text)
        self.assertIn("| – | <= 0.7 x | not measured (no cudaMallocAsync in this run) |", text)
        # A run without goals or granules (the older schema) gets neither table nor columns.
        with tempfile.TemporaryDirectory() as d:
            write(d, "test.jsonl", [HEADER] + RECORDS)
            text = results_md.render(pathlib.Path(d))
        self.assertNotIn("Goals of the default", text)
        self.assertNotIn("peak's granules", text)

    def test_goals_command_prints_one_short_table(self):
        lines = [
            {"pattern": "goal", "goal": "warm_ns", "what": "a.csv.gz: warm ns/op", "allocator": "gpumem-gpu",
             "param": "a.csv.gz", "value": 35.0, "compare": "<=", "bound": 40, "met": True},
            {"pattern": "goal", "goal": "warm_ns", "what": "b.csv: warm ns/op", "allocator": "gpumem-gpu",
             "param": "b.csv", "value": 55.5, "compare": "<=", "bound": 40, "met": False},
            rec("pair", "gpumem-gpu", 13.0, size_bytes=512),                   # not a goal: left out
        ]
        models = [{"pattern": "goal", "goal": "model_step", "what": "bert_infer: step", "allocator": "gpumem",
                   "param": "bert_infer", "compare": "<=", "bound": 1.0, "met": None, "note": "no transformers"}]
        with tempfile.TemporaryDirectory() as d:
            args = ["goals", str(write(d, "bench.jsonl", lines)), str(write(d, "models.jsonl", models)),
                    str(pathlib.Path(d) / "missing.jsonl")]
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(results_md.main(args), 0)
        text = out.getvalue()
        self.assertIn("missing.jsonl: not there", text)
        self.assertRegex(text, r"warm pass: ns/op +<= 40 +1/2  a 35, b 55.5\*\n")
        self.assertRegex(text, r"model step time / native's +<= 1 +0/0  bert_infer n/a\n")
        self.assertIn("goals met: 1 of 2 measured; not measured: no transformers", text)

    def test_the_simulated_device_comes_after_the_gpus(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, "a_sim.jsonl", [dict(HEADER, device="Simulated device", simulated=True)] + RECORDS)
            write(d, "z_gpu.jsonl", [HEADER] + RECORDS)
            text = results_md.render(pathlib.Path(d))
        self.assertLess(text.index("## NVIDIA Test GPU"), text.index("## Simulated device"))

    def test_bad_input_names_file_and_line(self):
        cases = [
            ([HEADER, "not json"], "test.jsonl:2: not JSON"),
            ([RECORDS[1]], "test.jsonl:1: a bench record before any run header"),
            ([dict(HEADER, commit="")], "test.jsonl:1: the run header lacks commit"),
            ([HEADER, rec("pair", "x", 1.0, size_bytes=1) | {"pattern": "sprint"}], "test.jsonl:2: unknown pattern 'sprint'"),
            ([HEADER, {"pattern": "pair", "allocator": "x", "size_bytes": 512}], "test.jsonl:2: a pair record without ns_per_pair"),
            ([HEADER], "the run of 2030-01-02 has no bench records"),
            ([HEADER, {"pattern": "goal", "allocator": "x", "goal": "pair_ns", "what": "pair", "compare": "<=",
                       "bound": 25, "met": True}], "test.jsonl:2: a measured goal record without value"),
            ([HEADER, {"pattern": "goal", "allocator": "x", "goal": "pair_ns", "what": "pair", "value": 1,
                       "bound": 25, "met": True}], "test.jsonl:2: a goal record without compare"),
        ]
        for lines, message in cases:
            with self.subTest(message=message), tempfile.TemporaryDirectory() as d:
                path = pathlib.Path(d) / "test.jsonl"
                path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
                with self.assertRaises(results_md.InputError) as caught:
                    results_md.render(pathlib.Path(d))
                self.assertIn(message, str(caught.exception))

    def test_check_tells_a_stale_file(self):
        with tempfile.TemporaryDirectory() as d:
            results = pathlib.Path(d) / "results"
            results.mkdir()
            write(results, "test.jsonl", [HEADER] + RECORDS)
            out = pathlib.Path(d) / "RESULTS.md"
            args = ["--results", str(results), "--output", str(out)]
            self.assertEqual(quiet(results_md.main, args + ["--check"])[0], 1)  # no file yet
            self.assertEqual(quiet(results_md.main, args)[0], 0)
            self.assertEqual(quiet(results_md.main, args + ["--check"])[0], 0)
            out.write_bytes(out.read_bytes() + b"\n")                            # one byte more
            rc, err = quiet(results_md.main, args + ["--check"])
            self.assertEqual(rc, 1)
            self.assertIn("is not what", err)

    def test_record_stores_a_header_and_the_records(self):
        with tempfile.TemporaryDirectory() as d:
            bench = write(d, "bench.jsonl", RECORDS)
            out = pathlib.Path(d) / "results" / "gpu.jsonl"
            base = ["record", str(out), "--device", "NVIDIA Test GPU", "--commit", "abc1234",
                    "--command", "gpumem bench all", "--date", "2030-01-02", "--input", str(bench)]
            self.assertEqual(quiet(results_md.main, base)[0], 0)
            self.assertEqual(quiet(results_md.main, base)[0], 0)                 # replaces
            runs = results_md.read_runs(out)
            self.assertEqual(len(runs), 1)
            self.assertEqual(runs[0]["header"]["commit"], "abc1234")
            self.assertNotIn("simulated", runs[0]["header"])
            self.assertEqual(len(runs[0]["records"]), len(RECORDS))
            self.assertEqual(quiet(results_md.main, base + ["--append"])[0], 0)
            self.assertEqual(len(results_md.read_runs(out)), 2)
            info = pathlib.Path(d) / "info.json"
            info.write_text(json.dumps({"device": 0, "name": "NVIDIA From Info"}) + "\n")
            from_info = [a for a in base if a not in ("--device", "NVIDIA Test GPU")] + ["--info", str(info)]
            self.assertEqual(quiet(results_md.main, from_info)[0], 0)
            self.assertEqual(results_md.read_runs(out)[0]["header"]["device"], "NVIDIA From Info")
            rc, err = quiet(results_md.main, [a for a in base if a not in ("--device", "NVIDIA Test GPU")])
            self.assertEqual(rc, 2)
            self.assertIn("name the device", err)
            bad = write(d, "bad.jsonl", [{"pattern": "pair"}])
            rc, err = quiet(results_md.main, base[:-1] + [str(bad)])
            self.assertEqual(rc, 2)
            self.assertIn("bad.jsonl:1: no allocator", err)


if __name__ == "__main__":
    unittest.main()
