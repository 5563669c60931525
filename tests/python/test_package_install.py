"""`pip install` of the repository into fresh virtual environments, as a user would, then the
package checked from outside the source tree (standard library only; no GPU needed).

    python3 test_package_install.py SOURCE_DIR WORK_DIR [--no-cuda-only]

1. With the CUDA layer (where the CUDA 13 toolkit is found): `pip install --no-build-isolation
   SOURCE_DIR` into WORK_DIR/venv; gpumem imports from the venv, gpumem.__version__ and the
   installed metadata are CMakeLists.txt's project(VERSION), libgpumem_torch.so is found inside
   the package, configure() takes a good key, raises ValueError naming a bad key or value (from
   keywords and from GPUMEM_CONFIG), and the console script gpumem-snapshot-to-csv runs.
2. Without it (GPUMEM_WITH_CUDA=OFF: configures only, nothing to compile): the package still
   installs and imports, and configure() raises saying the CUDA layer was not built.

scikit-build-core is what the build needs besides CMake and ninja (the system's are used): taken
from the system's Python when it has it (the venv then sees the system's packages), otherwise
installed into the venv from PyPI. The CMake build folder is kept in WORK_DIR, and ccache is used
when found, so a second run rebuilds only what changed.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

FAILS = []


def check(name, ok, detail=""):
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        FAILS.append(name)


def run(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def make_venv(path):
    """A fresh venv whose Python has scikit-build-core; returns its python."""
    have_system_skbuild = subprocess.run([sys.executable, "-c", "import scikit_build_core"],
                                         capture_output=True).returncode == 0
    cmd = [sys.executable, "-m", "venv", "--clear"]
    if have_system_skbuild:
        cmd.append("--system-site-packages")
    p = run(cmd + [path])
    if p.returncode != 0:
        sys.exit(f"cannot create a venv with {sys.executable}: {p.stderr.strip()}")
    py = os.path.join(path, "bin", "python")
    if not have_system_skbuild:
        p = run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "scikit-build-core>=0.10"])
        if p.returncode != 0:
            sys.exit("cannot install scikit-build-core into the venv (PyPI unreachable?):\n" + p.stdout + p.stderr)
    return py


def pip_install(py, source, build_dir, *defines):
    cmd = [py, "-m", "pip", "install", "--no-build-isolation", "--disable-pip-version-check",
           "-C", f"build-dir={build_dir}"]
    launcher = shutil.which("ccache")
    if launcher:
        defines += (f"CMAKE_CXX_COMPILER_LAUNCHER={launcher}", f"CMAKE_CUDA_COMPILER_LAUNCHER={launcher}")
    for d in defines:
        cmd += ["-C", f"cmake.define.{d}"]
    p = run(cmd + [source])
    if p.returncode != 0:
        print(p.stdout[-6000:], p.stderr[-6000:], sep="\n")
    return p


def in_venv(py, code, env=None):
    """Runs `code` with the venv's python from a folder outside the source tree."""
    with tempfile.TemporaryDirectory() as cwd:
        return subprocess.run([py, "-c", textwrap.dedent(code)], text=True, capture_output=True, cwd=cwd,
                              env=dict(os.environ if env is None else env, PYTHONPATH=""))


# What the venv checks print: one "name=value" line each.
PROBE = """
    import importlib.metadata, os, gpumem, gpumem._build_info as info
    print("file=" + gpumem.__file__)
    print("version=" + gpumem.__version__)
    print("metadata=" + importlib.metadata.version("gpumem"))
    print("cuda=" + str(info.cuda))
    try:
        print("lib=" + gpumem.library_path())
    except FileNotFoundError as e:
        print("nolib=" + str(e))
"""

CONFIGURE = """
    import gpumem
    gpumem.configure(max_reserved_bytes="8G", zero_on_free=False, initial_reserve="0")
    print("good=ok")
    for bad in ({"bogus": 1}, {"max_reserved_bytes": "x"}, {"upstream": "floppy"}, {"idle_budget": 0.05}):
        try:
            gpumem.configure(bad)
            print("bad=accepted " + repr(bad))
        except ValueError as e:
            print("bad=" + str(e))
"""


def probe(py):
    out = in_venv(py, PROBE)
    values = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return out, values


def with_cuda(py, source, work, version):
    p = pip_install(py, source, os.path.join(work, "build-cuda"))
    check("pip install --no-build-isolation (CUDA layer where the toolkit is found)", p.returncode == 0,
          "see the output above")
    if p.returncode != 0:
        return
    out, v = probe(py)
    check("gpumem imports from the venv", v.get("file", "").startswith(os.path.realpath(work)) or
          v.get("file", "").startswith(work), out.stdout + out.stderr)
    check("gpumem.__version__ is CMakeLists.txt's project(VERSION)", v.get("version") == version,
          f"{v.get('version')} != {version}")
    check("installed metadata has the same version", v.get("metadata") == version, v.get("metadata"))
    if v.get("cuda") != "True":
        print("no CUDA toolkit here: the checks that need libgpumem_torch.so are skipped")
        return
    pkg_dir = os.path.dirname(v.get("file", ""))
    check("libgpumem_torch.so is found inside the installed package",
          os.path.dirname(v.get("lib", "")) == pkg_dir, v.get("lib") or v.get("nolib"))
    out = in_venv(py, CONFIGURE)
    lines = [line.split("=", 1)[1] for line in out.stdout.splitlines() if line.startswith("bad=")]
    check("configure() takes good keys", "good=ok" in out.stdout, out.stdout + out.stderr)
    check("an unknown key raises ValueError naming it and the known keys",
          len(lines) == 4 and "unknown key 'bogus' (known: " in lines[0] and "max_reserved_bytes" in lines[0], lines)
    check("a bad value raises ValueError naming key, value and what is expected",
          len(lines) == 4 and "bad value 'x' for key 'max_reserved_bytes': expected a byte size" in lines[1]
          and "bad value 'floppy' for key 'upstream'" in lines[2], lines)
    check("a setting of the pool's policy is no option: ValueError naming it as unknown",
          len(lines) == 4 and "unknown key 'idle_budget' (known: " in lines[3], lines)
    env = dict(os.environ, GPUMEM_CONFIG="bogus=1,zero_on_free=0")
    out = in_venv(py, "import gpumem\ntry:\n    gpumem.configure()\nexcept ValueError as e:\n    print('err=' + str(e))",
                  env=env)
    check("a bad GPUMEM_CONFIG raises ValueError naming the key",
          "err=GPUMEM_CONFIG: unknown key 'bogus'" in out.stdout, out.stdout + out.stderr)
    script = os.path.join(os.path.dirname(py), "gpumem-snapshot-to-csv")
    p = run([script, "--help"])
    check("console script gpumem-snapshot-to-csv --help", p.returncode == 0 and
          p.stdout.startswith("usage: gpumem-snapshot-to-csv"), p.stdout + p.stderr)
    with tempfile.TemporaryDirectory() as d:
        snap = os.path.join(d, "snap.pickle")
        import pickle
        with open(snap, "wb") as f:
            pickle.dump({"segments": [], "device_traces": [[
                {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 1, "frames": []},
                {"action": "free_completed", "addr": 4096, "size": 512, "stream": 0, "time_us": 2,
                 "frames": []}]]}, f)
        p = run([script, snap])
        check("console script converts a snapshot", p.returncode == 0 and
              p.stdout.splitlines()[1:] == ["0,00:00:00.000001,allocate,0x1000,512,0x0",
                                            "0,00:00:00.000002,free,0x1000,512,0x0"], p.stdout + p.stderr)


def without_cuda(py, source, work, version):
    p = pip_install(py, source, os.path.join(work, "build-nocuda"), "GPUMEM_WITH_CUDA=OFF")
    check("pip install without the CUDA layer", p.returncode == 0, "see the output above")
    if p.returncode != 0:
        return
    out, v = probe(py)
    check("gpumem imports without the CUDA layer", v.get("version") == version and v.get("cuda") == "False",
          out.stdout + out.stderr)
    out = in_venv(py, "import gpumem\ntry:\n    gpumem.configure(max_reserved_bytes=0)\nexcept FileNotFoundError as e:\n"
                      "    print('err=' + str(e))")
    check("configure() says the package was built without its CUDA layer",
          "err=this gpumem package was built without its CUDA layer" in out.stdout, out.stdout + out.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("work")
    ap.add_argument("--no-cuda-only", action="store_true", help="only the install without the CUDA layer")
    args = ap.parse_args()
    source, work = os.path.abspath(args.source), os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        version = re.search(r"project\(gpumem\s+VERSION\s+([0-9][0-9.]*)", f.read()).group(1)
    if not args.no_cuda_only:
        with_cuda(make_venv(os.path.join(work, "venv")), source, work, version)
    without_cuda(make_venv(os.path.join(work, "venv-nocuda")), source, work, version)
    print("FAILED: " + ", ".join(FAILS) if FAILS else "all checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
