"""PEP 517 build backend for ckpt: `pip install .` and `pip wheel .` with
nothing downloaded (pyproject.toml: `requires = []`), standard library only
(pip runs it in an isolated environment).

build_wheel configures a product-only CMake build (-DBUILD_TESTING=OFF
-DCKPT_BENCH=OFF: no tests, no benches; Release -O2) in <source>/build-pip,
builds the targets `ckpt` (the command) and `ckpt_python` (the _ckpt extension
with the package and its HDF5 plugin), stages the CMake install components
"python" and "cli" (the one description of what is installed) and zips:
    ckpt/...                      the package: _ckpt, modules, _version.py, hdf5-plugins/
    ckpt-V.data/scripts/ckpt      the command (pip puts it in <env>/bin)
    ckpt-V.dist-info/             METADATA, WHEEL, top_level.txt, RECORD
The version is CMakeLists.txt's `project(ckpt VERSION ...)`.

Config settings (pip -C key=value):
    build-dir=DIR   configure and build in DIR instead; if DIR is an already
                    configured build tree, package what it holds, neither
                    reconfigured nor rebuilt (build it first: `ninja -C DIR ckpt
                    ckpt_python`): tests/python/test_install.py packages the
                    test build this way in seconds, while other tests run.
CMAKE_BUILD_PARALLEL_LEVEL bounds the compile jobs (default: all cores);
CMAKE_CXX_COMPILER_LAUNCHER=ccache is honoured by CMake itself.
"""
import base64
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NAME = "ckpt"
SUMMARY = "Sharded, atomic, hash-checked checkpoints for Megatron-style training (HDF5 shards)"


def _version():
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(\s*ckpt\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt: no `project(ckpt VERSION x.y)` to take the version from")
    return m.group(1)


def _log(msg):
    print(f"ckpt_backend: {msg}", file=sys.stderr, flush=True)


def _env():
    """The caller's environment without pip's isolation of Python (PYTHONPATH
    to an empty build env): CMake's Python probes must see the real interpreter."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}


def _run(cmd):
    _log("+ " + " ".join(cmd))
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, env=_env(), stdout=sys.stderr)
    _log(f"  ({time.monotonic() - t0:.1f} s)")


def _pybind11_dir():
    """pybind11's CMake folder from this interpreter or Debian's /usr/bin/python3."""
    for py in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        try:
            out = subprocess.run([py, "-m", "pybind11", "--cmakedir"], env=_env(), capture_output=True,
                                 text=True, timeout=60, check=False)
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    raise RuntimeError("pybind11 not found for the ckpt extension: apt install python3-pybind11 "
                       "(bash scripts/install_deps.sh installs every build package)")


def _configure(build):
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    opt = "-O2 -DNDEBUG"
    _run(["cmake", "-S", SOURCE, "-B", build, *gen, "-DCMAKE_BUILD_TYPE=Release",
          f"-DCMAKE_CXX_FLAGS_RELEASE={opt}", f"-DCMAKE_C_FLAGS_RELEASE={opt}",
          "-DBUILD_TESTING=OFF", "-DCKPT_BENCH=OFF", "-DCKPT_PYTHON=ON",
          # pybind11 links the extension with -flto in Release unless this is set: a
          # serial LTO link of glue code (the library objects are not LTO objects)
          "-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF",
          f"-DPYTHON_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={_pybind11_dir()}"])


def _build(settings):
    """Builds the command and the package (unless reusing a build tree); returns the build folder."""
    given = (settings or {}).get("build-dir")
    build = os.path.abspath(given) if given else os.path.join(SOURCE, "build-pip")
    if given and os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        _log(f"packaging the build tree {build} as it is")
        return build
    _configure(build)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    _run(["cmake", "--build", build, "--parallel", jobs, "--target", "ckpt", "ckpt_python"])
    return build


def _stage(build, stage):
    """Installs components python and cli under `stage`; returns (package dir, command)."""
    for comp in ("python", "cli"):
        _run(["cmake", "--install", build, "--prefix", stage, "--component", comp, "--strip"])
    inits = [root for root, _, files in os.walk(stage)
             if os.path.basename(root) == NAME and "__init__.py" in files]
    command = os.path.join(stage, "bin", NAME)
    if len(inits) != 1 or not os.path.isfile(command):
        raise RuntimeError(f"install of {build} did not give one ckpt package and bin/ckpt: {inits}")
    return inits[0], command


def _tag():
    v = sys.version_info
    py = f"cp{v.major}{v.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{py}-{py}{sys.abiflags}-{plat}"


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.9\n"
            "Description-Content-Type: text/plain\n\n"
            "The ckpt Python package, the ckpt command and ckpt's HDF5 zstd plugin. torch, numpy and\n"
            "h5py are used when present (Debian: python3-torch, python3-numpy, python3-h5py).\n")


class _Wheel:
    """A wheel written file by file, with its RECORD (PEP 427)."""

    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{arcname},sha256={digest},{len(data)}")

    def add_file(self, arcname, path):
        with open(path, "rb") as f:
            self.add(arcname, f.read(), 0o755 if os.access(path, os.X_OK) else 0o644)

    def close(self, record_name):
        self.record.append(f"{record_name},,")
        self.zip.writestr(zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0)),
                          "\n".join(self.record) + "\n")
        self.zip.close()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    del metadata_directory  # the metadata is written here, from the same values
    version = _version()
    t0 = time.monotonic()
    build = _build(config_settings)
    name = f"{NAME}-{version}-{_tag()}.whl"
    info = f"{NAME}-{version}.dist-info"
    with tempfile.TemporaryDirectory(prefix="ckpt-wheel-") as stage:
        package, command = _stage(build, stage)
        wheel = _Wheel(os.path.join(wheel_directory, name))
        for root, dirs, files in os.walk(package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for f in sorted(files):
                path = os.path.join(root, f)
                wheel.add_file(os.path.relpath(path, os.path.dirname(package)), path)
        wheel.add_file(f"{NAME}-{version}.data/scripts/{NAME}", command)
        wheel.add(f"{info}/METADATA", _metadata(version).encode())
        wheel.add(f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: ckpt_backend\nRoot-Is-Purelib: false\n"
                                    f"Tag: {_tag()}\n").encode())
        wheel.add(f"{info}/top_level.txt", f"{NAME}\n".encode())
        wheel.close(f"{info}/RECORD")
    _log(f"{name} built in {time.monotonic() - t0:.0f} s")
    return name


def _sdist_files():
    """The tracked files when this is a git checkout, else every file but builds."""
    try:
        out = subprocess.run(["git", "-C", SOURCE, "ls-files", "-z"], capture_output=True, check=True)
        return [f for f in out.stdout.decode().split("\0") if f and os.path.isfile(os.path.join(SOURCE, f))]
    except (OSError, subprocess.CalledProcessError):
        skip = re.compile(r"^(build[^/]*|\.git|out)(/|$)")
        found = []
        for root, dirs, files in os.walk(SOURCE):
            rel = os.path.relpath(root, SOURCE)
            dirs[:] = [d for d in dirs if not skip.match(os.path.normpath(os.path.join(rel, d)))]
            found += [os.path.normpath(os.path.join(rel, f)) for f in files]
        return found


def build_sdist(sdist_directory, config_settings=None):
    del config_settings
    version = _version()
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted(_sdist_files()):
            tar.add(os.path.join(SOURCE, rel), arcname=f"{base}/{rel}", recursive=False)
        data = _metadata(version).encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
