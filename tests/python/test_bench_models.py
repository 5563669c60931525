"""integrations/bench_models.py without a GPU: the parent's schedule (native, gpumem's default and
expandable segments, interleaved, reversed every other round, within --budget-s), the children's
environment, gpumem installed with no options, the goals it reads off the runs, and a model whose
packages are missing skipped rather than failed. The children are stood in for."""
import contextlib
import io
import json
import os
import pathlib
import sys
import tempfile
import types
import unittest
from unittest import mock

INTEGRATIONS = pathlib.Path(__file__).resolve().parents[2] / "integrations"
sys.path.insert(0, str(INTEGRATIONS))
import bench_models  # noqa: E402
import fresh_runs  # noqa: E402


def fake_run(step_ms, reserved, calls, skipped=()):
    """A run_one that records its calls and answers with `step_ms[alloc]` per step and
    `reserved[alloc]` bytes reserved over 1 GB allocated."""
    def run_one(model, alloc, steps, timeout_s=0):
        calls.append((model, alloc))
        if model in skipped:
            return {"model": model, "allocator": alloc, "ok": False, "skipped": "transformers is not installed"}
        return {"model": model, "allocator": alloc, "steps": steps, "ok": True, "device": "Test GPU",
                "step_ms": [step_ms[alloc]] * steps, "step_ms_median": step_ms[alloc], "values": [1.0] * steps,
                "peak_reserved_bytes": reserved[alloc], "peak_allocated_bytes": 10**9,
                **({"step_granules": [0] * steps} if alloc == "gpumem" else {})}
    return run_one


def run_main(args, run_one):
    out = io.StringIO()
    with mock.patch.object(bench_models, "run_one", run_one), mock.patch.object(sys, "argv", ["bench_models.py", *args]), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = bench_models.main()
    return rc, out.getvalue()


class BenchModels(unittest.TestCase):
    def test_rounds_interleave_native_gpumem_and_expandable(self):
        calls = []
        run = fake_run({"native": 10.0, "gpumem": 9.0, "native-expandable": 11.0},
                       {"native": 1.3e9, "gpumem": 1.02e9, "native-expandable": 1.1e9}, calls)
        rc, text = run_main(["--models", "bert_infer", "--repeat", "2", "--budget-s", "1000"], run)
        self.assertEqual(rc, 0)
        self.assertEqual([a for _, a in calls],
                         ["native", "gpumem", "native-expandable", "native-expandable", "gpumem", "native"])
        self.assertRegex(text, r"bert_infer +gpumem +2 +9.00 +0.900 +973 +1.020 +0.785 +0.0 +same")
        self.assertRegex(text, r"bert_infer +native-expandable +2 +11.00 +1.100 ")
        self.assertRegex(text, r"bert_infer: step time / native's median +0.900  <= 1.00  met")
        self.assertRegex(text, r"bert_infer: peak reserved / peak allocated +1.020  <= 1.03  met")

    def test_goals_not_met_and_their_json_lines(self):
        calls = []
        run = fake_run({"native": 10.0, "gpumem": 10.5, "native-expandable": 10.0},
                       {"native": 1.3e9, "gpumem": 1.05e9, "native-expandable": 1.1e9}, calls)
        with tempfile.TemporaryDirectory() as d:
            path = pathlib.Path(d) / "models.jsonl"
            rc, text = run_main(["--models", "resnet50_train", "--repeat", "1", "--json-out", str(path)], run)
            goals = [json.loads(x) for x in path.read_text().splitlines() if '"pattern": "goal"' in x]
        self.assertEqual(rc, 0)  # goals not met are figures, not failures
        self.assertIn("0 of 2 met", text)
        self.assertEqual([(g["goal"], g["met"], g["bound"]) for g in goals],
                         [("model_step", False, 1.0), ("model_reserve", False, 1.03)])
        self.assertAlmostEqual(goals[0]["value"], 1.05)

    def test_a_model_without_its_packages_is_skipped(self):
        calls = []
        run = fake_run({"native": 10.0, "gpumem": 9.0, "native-expandable": 11.0},
                       {"native": 1.3e9, "gpumem": 1.02e9, "native-expandable": 1.1e9}, calls, skipped={"gpt2_train"})
        rc, text = run_main(["--models", "gpt2_train,bert_infer", "--repeat", "1"], run)
        self.assertEqual(rc, 0)
        self.assertEqual(calls[0], ("gpt2_train", "native"))  # one child finds out, no more
        self.assertEqual(sum(1 for m, _ in calls if m == "gpt2_train"), 1)
        self.assertIn("gpt2_train      skipped: transformers is not installed", text)
        self.assertRegex(text, r"gpt2_train: step time / native's median +-  <= 1.00  not measured "
                               r"\(transformers is not installed\)")

    def test_no_round_starts_past_the_budget(self):
        calls = []
        run = fake_run({"native": 10.0, "gpumem": 9.0, "native-expandable": 11.0},
                       {"native": 1.3e9, "gpumem": 1.02e9, "native-expandable": 1.1e9}, calls)
        rc, text = run_main(["--models", "bert_infer,resnet50_train", "--repeat", "5", "--budget-s", "0"], run)
        self.assertEqual(rc, 0)
        # The first model of the first round runs whatever the budget; nothing after it.
        self.assertEqual(calls, [("bert_infer", "native"), ("bert_infer", "gpumem"), ("bert_infer", "native-expandable")])
        self.assertIn("resnet50_train  skipped: no time left in --budget-s 0", text)

    def test_children_environment_and_gpumem_with_no_options(self):
        with mock.patch.dict(os.environ, {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"}):
            self.assertEqual(fresh_runs.child_env("native-expandable")["PYTORCH_CUDA_ALLOC_CONF"],
                             "expandable_segments:True")
            self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", fresh_runs.child_env("native"))
            self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", fresh_runs.child_env("gpumem"))
        used = []
        fake_torch = types.ModuleType("gpumem.torch")
        fake_torch.use = lambda **options: used.append(options)
        fake_pkg = types.ModuleType("gpumem")
        fake_pkg.torch = fake_torch
        with mock.patch.dict(sys.modules, {"gpumem": fake_pkg, "gpumem.torch": fake_torch}):
            fresh_runs.use_torch_allocator("gpumem")
        self.assertEqual(used, [{}])


if __name__ == "__main__":
    unittest.main()
