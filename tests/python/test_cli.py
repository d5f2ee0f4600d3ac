"""The `flashtile` command's option checks: each bad command line is refused with one message that names the option,
before anything is allocated or run. Runs the tool of the build tree (tools/flashtile beside FLASHTILE_LIBRARY), the
one FLASHTILE_CLI names, or an installed one on PATH; skipped where there is none."""
import os
import shutil
import subprocess

import pytest


def _find_tool():
    if os.environ.get("FLASHTILE_CLI"):
        return os.environ["FLASHTILE_CLI"]
    library = os.environ.get("FLASHTILE_LIBRARY")
    beside = library and os.path.join(os.path.dirname(library), "tools", "flashtile")
    return beside if beside and os.path.exists(beside) else shutil.which("flashtile")


TOOL = _find_tool()
pytestmark = pytest.mark.skipif(not TOOL, reason="no flashtile command built (FLASHTILE_CLI, or tools/flashtile "
                                                 "beside FLASHTILE_LIBRARY)")


def flashtile(tmp_path, *args):
    """(exit code, stdout, stderr) of one command, run in an empty directory (bench writes its results there)."""
    p = subprocess.run([TOOL, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def test_run_refuses_tensors_past_memory_with_their_size(tmp_path):
    # 2^40 x 2^40 heads: the byte count overflowed int64 and printed "0.0 MiB" before the library refused.
    code, out, err = flashtile(tmp_path, "run", "-s", "64", "-b", "1099511627776", "--heads", "1099511627776")
    assert code == 1
    assert "7.59e+22 MiB of tensors" in out
    assert "the tensors need 7.59e+22 MiB, more than this machine's" in err


def test_run_checks_heads_before_allocating(tmp_path):
    code, out, err = flashtile(tmp_path, "run", "-s", "64", "--heads", "3", "--heads-kv", "2")
    assert code == 2 and out == ""  # nothing printed, so nothing allocated: the check precedes the inputs
    assert err.startswith("flashtile run: --heads-kv: 2 does not divide --heads 3")


def test_bench_checks_shape_heads_before_running(tmp_path):
    code, _, err = flashtile(tmp_path, "bench", "--shapes", "1,64,3,16,2")
    assert code == 2 and "--shapes: in '1,64,3,16,2', Hkv (2) does not divide H (3)" in err
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("command", ["run", "check"])
def test_seed_range_is_uint64_without_size_suffix(tmp_path, command):
    code, _, err = flashtile(tmp_path, command, "--seed", "-1")
    assert code == 2 and "--seed: -1 is out of range [0, 18446744073709551615]" in err
    code, _, err = flashtile(tmp_path, command, "--seed", "1k")  # a seed is not a size: no k suffix
    assert code == 2 and "--seed: '1k' is not an integer" in err


def test_any_negative_window_bound_is_unbounded(tmp_path):
    # SPEC.md: a negative bound means unbounded on that side, not only -1.
    code, out, err = flashtile(tmp_path, "run", "-s", "64", "--heads", "1", "--head-dim", "16", "--dtype", "fp32",
                               "--no-causal", "--window", "-2,0", "-r", "1", "--verify-rows", "4", "--backend",
                               "cpu-flash2", "--seed", "18446744073709551615")
    assert code == 0, err
    assert "window(-2,0)" in out and "verify   PASS" in out
    code, out, _ = flashtile(tmp_path, "run", "--help")
    assert code == 0 and "negative = unbounded side" in out


def test_bench_refuses_an_unavailable_backend_before_any_case(tmp_path):
    code, out, _ = flashtile(tmp_path, "--help")
    if "CUDA backends: not built in" not in out:
        pytest.skip("this flashtile has CUDA built in; whether cuda-sm80 runs depends on the GPU")
    code, out, err = flashtile(tmp_path, "bench", "--grid", "C", "--backends", "cuda-sm80")
    assert code == 1 and out == ""
    assert err == "flashtile bench: backend cuda-sm80: flashtile was built without CUDA (FLASHTILE_ENABLE_CUDA=OFF)\n"
    assert not os.listdir(tmp_path)  # no results file of failed rows
