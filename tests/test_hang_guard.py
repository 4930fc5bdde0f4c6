"""``LOWPREC_TEST_TIMEOUT`` (tests/conftest.py): a test that never returns, as a hung GPU kernel
does, fails by name and the others still run."""

import os
import subprocess
import sys
import time

from conftest import REPO, TIMEOUT_ENV

_TESTS = """
import time

def test_quick():
    pass

def test_hangs_forever():
    time.sleep(120)

def test_after():
    pass
"""


def test_a_hung_test_fails_by_name_and_the_others_run(tmp_path):
    (tmp_path / "test_hang.py").write_text(_TESTS)
    env = {**os.environ, TIMEOUT_ENV: "3", "PYTHONPATH": str(REPO / "tests")}
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                          "-n", "2", "test_hang.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=100)
    assert time.monotonic() - start < 60, "the guard did not stop the hung test"
    assert out.returncode != 0
    assert "FAILED test_hang.py::test_hangs_forever" in out.stdout, out.stdout[-2000:]
    assert "1 failed, 2 passed" in out.stdout, out.stdout[-2000:]
