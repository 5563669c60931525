"""The smoke scripts' bookkeeping: one line per check, then a verdict line and the exit status."""
import sys

failures = []


def check(name, cond, detail=""):
    """Prints `ok` or `FAIL`, the check's name and what it saw; remembers a failure."""
    print(f"{'ok  ' if cond else 'FAIL'} {name} {detail}", flush=True)
    if not cond:
        failures.append(name)


def finish():
    """`SMOKE PASS` or `SMOKE FAIL <names>`; exits 1 if any check failed."""
    print("SMOKE", "PASS" if not failures else "FAIL " + ",".join(failures))
    sys.exit(1 if failures else 0)
