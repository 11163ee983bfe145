#!/usr/bin/env python3
"""Install + find_package test (ctest install_example).

  install_example.py <build dir> <source dir> <work dir> <mpirun prefix...>

1. `cmake --install <build> --prefix <work>/prefix`; checks the installed
   files: the command, libckpt/libckpt_mpi shared (versioned) and static, the
   CMake package, the pkg-config files, the HDF5 plugin, and exactly the
   public headers (package/public_headers.txt) under include/ckpt.
2. Every installed header compiles on its own with only the flags
   `pkg-config --cflags ckpt-mpi` gives (the include root is self-contained).
3. Configures examples/cpp out of tree with find_package(ckpt)
   (CMAKE_PREFIX_PATH=<prefix>), builds it, and links it once more with
   `pkg-config --libs ckpt-mpi`.
4. Runs it under mpirun: save at TP4 (-np 4), load at TP2 (-np 2) checking
   every value, for both builds.
5. Negative control: one flipped byte in a stored chunk of mlp.fc2.weight
   makes the load fail naming that tensor.
Every step has a deadline; on expiry the whole process group is killed.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys

DEADLINE_S = 240


def run(cmd, env=None, expect_ok=True, cwd=None):
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        sys.exit(f"FAIL: deadline ({DEADLINE_S} s) expired: {' '.join(cmd)}\n{out}")
    print(out, end="", flush=True)
    if expect_ok and proc.returncode != 0:
        sys.exit(f"FAIL: exit {proc.returncode}: {' '.join(cmd)}")
    return proc.returncode, out


def check_installed(build, prefix):
    must = ["bin/ckpt", "lib/libckpt.a", "lib/libckpt_mpi.a", "lib/cmake/ckpt/ckptConfig.cmake",
            "lib/cmake/ckpt/ckptConfigVersion.cmake", "lib/cmake/ckpt/ckptTargets.cmake",
            "lib/pkgconfig/ckpt.pc", "lib/pkgconfig/ckpt-mpi.pc", "lib/ckpt/hdf5-plugins/libckpt_h5zstd.so"]
    missing = [m for m in must if not os.path.isfile(os.path.join(prefix, m))]
    for lib in ("libckpt", "libckpt_mpi"):
        if not glob.glob(os.path.join(prefix, f"lib/{lib}.so.*.*.*")) or \
                not os.path.islink(os.path.join(prefix, f"lib/{lib}.so")):
            missing.append(f"lib/{lib}.so (versioned, with links)")
    if missing:
        sys.exit("FAIL: not installed: " + ", ".join(missing))
    with open(os.path.join(build, "package/public_headers.txt"), encoding="utf-8") as f:
        public = sorted(line.strip() for line in f if line.strip())
    root = os.path.join(prefix, "include/ckpt")
    installed = sorted(os.path.relpath(p, root) for p in glob.glob(root + "/**/*.h", recursive=True))
    if installed != public:
        sys.exit(f"FAIL: installed headers {installed} != public headers {public}")
    print(f"installed: {len(must)} files + 2 versioned libraries with links, {len(installed)} public headers")
    return public


def pkg_config(prefix, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(prefix, "lib/pkgconfig"))
    return run(["pkg-config", *args], env=env)[1].split()


def check_headers_alone(prefix, headers, work):
    cflags = pkg_config(prefix, "--cflags", "ckpt-mpi")
    for h in headers:
        tu = os.path.join(work, "header_alone.cc")
        with open(tu, "w", encoding="utf-8") as f:
            f.write(f'#include "{h}"\n')
        run(["c++", "-std=c++20", "-fsyntax-only", *cflags, tu])
    print(f"each of {len(headers)} public headers compiles alone against the install")


def build_example(source, prefix, work):
    ex_build = os.path.join(work, "example-build")
    run(["cmake", "-S", os.path.join(source, "examples/cpp"), "-B", ex_build,
         f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
    run(["cmake", "--build", ex_build])
    pc_exe = os.path.join(work, "tp_reshard_pc")
    run(["c++", "-std=c++20", "-O1", os.path.join(source, "examples/cpp/tp_reshard.cc"), "-o", pc_exe,
         *pkg_config(prefix, "--cflags", "--libs", "ckpt-mpi"), f"-Wl,-rpath,{prefix}/lib"])
    return [os.path.join(ex_build, "tp_reshard"), pc_exe]


def flip_chunk_byte(root):
    """Flips one byte inside the first stored chunk of mlp.fc2.weight (manifest offsets)."""
    it = sorted(glob.glob(os.path.join(root, "iter_*")))[-1]
    with open(os.path.join(it, "manifest.json"), encoding="utf-8") as f:
        m = json.load(f)
    shard = m["tensors"]["mlp.fc2.weight"]["shards"][0]
    offset, size, _ = shard["chunks"][0]
    path = os.path.join(it, m["files"][shard["file"]]["name"])
    with open(path, "r+b") as f:
        f.seek(offset + size // 2)
        b = f.read(1)
        f.seek(offset + size // 2)
        f.write(bytes([b[0] ^ 0x40]))
    return path


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    build, source, work = (os.path.abspath(p) for p in sys.argv[1:4])
    mpirun = sys.argv[4:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prefix = os.path.join(work, "prefix")
    run(["cmake", "--install", build, "--prefix", prefix])
    headers = check_installed(build, prefix)
    check_headers_alone(prefix, headers, work)
    for i, exe in enumerate(build_example(source, prefix, work)):
        root = os.path.join(work, f"ckpt{i}")
        run([*mpirun, "-np", "4", exe, "save", root])
        _, out = run([*mpirun, "-np", "2", exe, "load", root])
        if out.count("0 mismatches") != 2 or "verify:" not in out:
            sys.exit("FAIL: the TP2 load did not report 0 mismatches on both ranks")
    bad = flip_chunk_byte(root)
    rc, out = run([*mpirun, "-np", "2", exe, "load", root], expect_ok=False)
    if rc == 0 or "mlp.fc2.weight" not in out:
        sys.exit(f"FAIL: negative control: load passed after a flipped byte in {bad}")
    print(f"negative control ok: a flipped byte in {os.path.basename(bad)} fails the load (exit {rc})")
    print("PASS: install + find_package + pkg-config example, TP4 -> TP2 under mpirun")


if __name__ == "__main__":
    main()
