"""Installs of the Python package and the command, used as a user would: from
another directory, with no PYTHONPATH / LD_LIBRARY_PATH / HDF5_PLUGIN_PATH.

- `make install` (cmake --install, component "python") into a temporary
  prefix: the package imports from there alone and round-trips a tensor. On
  Debian the default prefix /usr/local puts it at
  /usr/local/lib/python3.N/dist-packages, which /usr/bin/python3 searches.
- `pip wheel .` + `pip install` of that wheel into a fresh
  `python3 -m venv --system-site-packages` (README "Install"), offline
  (--no-index, build isolation on: the backend needs nothing from PyPI). Bounded
  to ~15 s by packaging the already-built test tree (-C build-dir=<build>,
  python/build_backend/ckpt_backend.py) instead of compiling a product-only
  build (minutes; measured for the README by hand). Checks `ckpt --version`,
  `ckpt.__version__` (both CMakeLists.txt's project version), the command on
  a checkpoint, and h5py reading a zstd shard after `import ckpt` (and not
  before: the negative control).
"""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("CKPT_BUILD_DIR", os.path.join(SOURCE, "build"))
USER_ENV_DROPS = ("PYTHONPATH", "LD_LIBRARY_PATH", "HDF5_PLUGIN_PATH", "CKPT_BIN", "PYTHONHOME")


def project_version():
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"project\(\s*ckpt\s+VERSION\s+([0-9.]+)", f.read()).group(1)


def user_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in USER_ENV_DROPS}
    env.update(extra)
    return env


def run(cmd, cwd, env, check=True, timeout=120):
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert out.returncode == 0, f"{' '.join(map(str, cmd))}: exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


SAVE = ("import ckpt, numpy as np; w = np.arange(4096, dtype=np.float32) % 7; "
        "ckpt.save({'w': ckpt.ShardedTensor.from_rank_offsets('w', w)}, 'ck', 1, compress='zstd'); "
        "z = np.zeros(4096, dtype=np.float32); ckpt.load({'w': ckpt.ShardedTensor.from_rank_offsets('w', z)}, 'ck'); "
        "assert (w == z).all(); print(ckpt.__file__, ckpt.__version__)")

# Reads every /tensors dataset of the zstd checkpoint 'ck' with h5py; argv[1]
# says whether to `import ckpt` first. Prints the values' sum.
H5PY_READ = r"""
import glob, sys
if sys.argv[1] == "1":
    import ckpt
import h5py, numpy as np
total, filters = 0.0, set()
for path in glob.glob("ck/iter_*/*.h5"):
    with h5py.File(path, "r") as f:
        for name, ds in f["tensors"].items():
            plist = ds.id.get_create_plist()
            filters |= {plist.get_filter(i)[0] for i in range(plist.get_nfilters())}
            total += float(np.asarray(ds[()], dtype=np.float64).sum())
assert 32015 in filters, filters
print(total)
"""
EXPECTED_SUM = float(sum(i % 7 for i in range(4096)))


def check_as_user(python, command, cwd, env):
    """The package and the command from `cwd` with `env` (no ckpt variables)."""
    out = run([python, "-c", SAVE], cwd, env)
    path, version = out.stdout.split()
    assert version == project_version()
    ver = run([command, "--version"], cwd, env)
    assert ver.stdout.strip() == f"ckpt {project_version()}", ver.stdout
    run([command, "verify", "ck"], cwd, env)
    # h5py alone cannot decode filter 32015 (negative control); after `import ckpt` it can.
    assert run([python, "-c", H5PY_READ, "0"], cwd, env, check=False).returncode != 0
    assert float(run([python, "-c", H5PY_READ, "1"], cwd, env).stdout) == EXPECTED_SUM
    return path


def test_install_into_prefix_imports_and_round_trips(tmp_path):
    prefix = tmp_path / "prefix"
    for comp in ("python", "cli"):
        subprocess.run(["cmake", "--install", BUILD, "--component", comp, "--prefix", str(prefix)], check=True,
                       capture_output=True)
    site = prefix / "lib" / f"python3.{sys.version_info[1]}" / "dist-packages"
    if not site.exists():
        site = prefix / "lib" / f"python3.{sys.version_info[1]}" / "site-packages"
    assert (site / "ckpt" / "__init__.py").exists(), list(prefix.rglob("*"))
    assert (site / "ckpt" / "hdf5-plugins" / "libckpt_h5zstd.so").exists()
    dyn = run(["readelf", "-d", str(prefix / "bin" / "ckpt")], tmp_path, user_env()).stdout
    assert "$ORIGIN/../lib" in dyn, dyn  # installed binaries find libckpt*.so without LD_LIBRARY_PATH
    work = tmp_path / "work"
    work.mkdir()
    path = check_as_user(sys.executable, str(prefix / "bin" / "ckpt"), work, user_env(PYTHONPATH=str(site)))
    assert path.startswith(str(site))


@pytest.mark.skipif(subprocess.run([sys.executable, "-m", "venv", "-h"], capture_output=True).returncode != 0,
                    reason="python3-venv missing (scripts/install_deps.sh installs it)")
def test_pip_wheel_into_venv_works_from_another_directory(tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path, user_env())
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir"]
    wheels = tmp_path / "wheels"
    run([*pip, "wheel", "--no-index", "--no-deps", "--config-settings", f"build-dir={BUILD}", "-w", str(wheels), SOURCE],
        tmp_path, user_env(), timeout=300)
    (wheel,) = wheels.glob("ckpt-*.whl")
    assert wheel.name.startswith(f"ckpt-{project_version()}-cp3")
    run([*pip, "install", "--no-index", str(wheel)], tmp_path, user_env())
    work = tmp_path / "work"
    work.mkdir()
    path = check_as_user(py, str(venv / "bin" / "ckpt"), work, user_env())
    assert path.startswith(str(venv)), path
