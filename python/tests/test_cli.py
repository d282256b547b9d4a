"""Interoperability with the `ibp` CLI: files packed by the CLI open in Python,
files packed by Python unpack with the CLI, and the same options give
byte-identical containers either way."""

import subprocess

import numpy as np
import pytest

import ibp
from conftest import bf16_bits, make_rows

CASES = [
    ("float32", "ibp", [], {}),
    ("uint8", "ibp", ["--chunk", "2", "--threshold", "0.85", "--layout", "inplace"],
     dict(chunk=2, threshold=0.85, layout="inplace")),
    ("int64", "ibp", ["--clusters", "3", "--seed", "11", "--sample", "0.5"],
     dict(clusters=3, seed=11, sample=0.5)),
    ("float16", "exp", ["--codec", "exp", "--block-rows", "64"], dict(codec="exp", block_rows=64)),
    ("float32", "exp", ["--codec", "exp", "--exp-table", "hist"], dict(codec="exp", exp_table="hist")),
    ("float32", "exp-rows", ["--codec", "exp-rows"], dict(codec="exp-rows")),
    ("bf16", "exp-rows", ["--codec", "exp-rows", "--dtype", "bf16", "--threads", "2"],
     dict(codec="exp-rows", dtype="bf16", nthreads=2)),
    ("bf16", "fp8", ["--codec", "fp8", "--lossy", "--dtype", "bf16", "--fp8-format", "e5m2",
                     "--fp8-block", "64", "--block-rows", "100"],
     dict(codec="fp8", lossy=True, dtype="bf16", fp8_format="e5m2", fp8_block=64, block_rows=100)),
    ("float32", "fp8", ["--codec", "fp8", "--lossy", "--no-hadamard", "--no-adaptive"],
     dict(codec="fp8", lossy=True, hadamard=False, adaptive=False)),
]


def run(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    assert r.returncode == 0, "%s failed (%d): %s%s" % (args, r.returncode, r.stdout, r.stderr)
    return r.stdout


def data(rng, dtype):
    if dtype == "bf16":
        return bf16_bits(make_rows(rng, 1000, (48,), "float32"))
    return make_rows(rng, 1000, (48,), dtype)


@pytest.mark.parametrize("dtype,codec,cli_args,py_opts", CASES)
def test_same_container_bytes(cli, tmp_path, rng, dtype, codec, cli_args, py_opts):
    a = data(rng, dtype)
    np.save(tmp_path / "a.npy", a)
    run(cli, "pack", tmp_path / "a.npy", tmp_path / "cli.ibp", *cli_args)
    ibp.pack(a, tmp_path / "py.ibp", **py_opts)
    assert (tmp_path / "cli.ibp").read_bytes() == (tmp_path / "py.ibp").read_bytes()


@pytest.mark.parametrize("dtype,codec,cli_args,py_opts", CASES)
def test_cli_file_opens_in_python(cli, tmp_path, rng, dtype, codec, cli_args, py_opts):
    a = data(rng, dtype)
    np.save(tmp_path / "a.npy", a)
    run(cli, "pack", tmp_path / "a.npy", tmp_path / "a.ibp", *cli_args)
    run(cli, "unpack", tmp_path / "a.ibp", tmp_path / "cli_back.npy")
    cli_back = np.load(tmp_path / "cli_back.npy")
    with ibp.open(tmp_path / "a.ibp") as s:
        assert s.codec == codec and s.shape == a.shape
        back = s.read()
        # what the CLI decodes (lossless: the original; fp8: the same reconstruction)
        assert back.tobytes() == cli_back.tobytes()
        if codec != "fp8":
            assert back.tobytes() == a.tobytes()
        ids = np.arange(999, -1, -7)
        np.savetxt(tmp_path / "ids.txt", ids, fmt="%d")
        run(cli, "gather", tmp_path / "a.ibp", "--ids", tmp_path / "ids.txt", "--out",
            tmp_path / "g.npy")
        assert s.gather(ids).tobytes() == np.load(tmp_path / "g.npy").tobytes()


@pytest.mark.parametrize("dtype,codec,cli_args,py_opts", CASES)
def test_python_file_unpacks_with_cli(cli, tmp_path, rng, dtype, codec, cli_args, py_opts):
    a = data(rng, dtype)
    ibp.pack(a, tmp_path / "a.ibp", **py_opts)
    run(cli, "verify", tmp_path / "a.ibp")
    run(cli, "unpack", tmp_path / "a.ibp", tmp_path / "back.npy")
    back = np.load(tmp_path / "back.npy")
    assert back.shape == a.shape
    if codec != "fp8":
        assert back.tobytes() == a.tobytes()
    else:
        assert back.tobytes() == ibp.open(tmp_path / "a.ibp").read().tobytes()
