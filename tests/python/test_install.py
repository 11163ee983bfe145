"""`make install` of the Python package (component "python"): installed into
a temporary prefix, the package imports from there alone and round-trips a
tensor. On Debian the default prefix /usr/local puts it at
/usr/local/lib/python3.N/dist-packages, which /usr/bin/python3 searches."""
import os
import subprocess
import sys

BUILD = os.environ.get("CKPT_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))


def test_install_into_prefix_imports_and_round_trips(tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", BUILD, "--component", "python", "--prefix", str(prefix)], check=True,
                   capture_output=True)
    site = prefix / "lib" / f"python3.{sys.version_info[1]}" / "dist-packages"
    if not site.exists():
        site = prefix / "lib" / f"python3.{sys.version_info[1]}" / "site-packages"
    assert (site / "ckpt" / "__init__.py").exists(), list(prefix.rglob("*"))
    code = ("import ckpt, torch; w = torch.arange(6.); "
            "ckpt.save({'w': ckpt.ShardedTensor.from_rank_offsets('w', w)}, 'ck', 1); "
            "z = torch.zeros(6); ckpt.load({'w': ckpt.ShardedTensor.from_rank_offsets('w', z)}, 'ck'); "
            "assert torch.equal(w, z); print(ckpt.__file__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(site))
