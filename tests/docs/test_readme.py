"""The README's first C++ example is the code tests/docs/readme_example.cpp compiles and runs."""
import pathlib
import re
import textwrap
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def readme_block() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^```cpp\n(.*?)^```", text, re.S | re.M)
    if not m:
        raise AssertionError("README.md has no ```cpp block")
    return [line for line in m.group(1).splitlines() if line.strip()]


def example_lines() -> list[str]:
    text = (ROOT / "tests" / "docs" / "readme_example.cpp").read_text(encoding="utf-8")
    parts = re.findall(r"// README begin\n(.*?)^\s*// README end", text, re.S | re.M)
    if not parts:
        raise AssertionError("readme_example.cpp has no README markers")
    return [line for part in parts for line in textwrap.dedent(part).splitlines() if line.strip()]


class ReadmeExample(unittest.TestCase):
    def test_the_readme_shows_the_code_the_test_runs(self):
        self.assertEqual(readme_block(), example_lines(),
                         "README.md's first ```cpp block and tests/docs/readme_example.cpp differ: "
                         "change both together")


if __name__ == "__main__":
    unittest.main()
