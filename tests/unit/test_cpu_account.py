"""CpuAccount splits a window's CPU by process: a process that burns CPU is charged for it,
an idle one is not, and the machine's total covers both."""

from __future__ import annotations

import subprocess
import sys
import time

from tidemark.stack.cpu_account import CpuAccount, process_cpu_s

_BURN = ("import time\n"
         "while time.process_time() < 0.4: pass\n"
         "print('done', flush=True)\n"
         "import sys; sys.stdin.read()\n")


def test_a_busy_process_is_charged_and_an_idle_one_is_not() -> None:
    idle = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    busy = subprocess.Popen([sys.executable, "-c", _BURN], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        account = CpuAccount({"work": {"busy": busy.pid, "idle": idle.pid}})
        account.start()
        assert busy.stdout is not None
        assert busy.stdout.readline().strip() == "done"  # it used 0.4 s of CPU by now
        account.stop()
        used_busy = account.used("work", only="busy")
        used_idle = account.used("work", only="idle")
        assert used_busy is not None and used_idle is not None
        assert 0.2 <= used_busy <= account.window_s + 0.05
        assert used_idle < 0.1
        assert account.used("work", but="idle") == used_busy
        report = account.report({"busy": used_busy, "idle": used_idle}, messages=1000)
        assert report["core_s"]["machine"] >= used_busy - 0.05
        assert report["us_per_msg"]["busy"] == round(used_busy / 1000 * 1e6, 2)
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()


def test_a_gone_process_reads_as_none() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    deadline = time.monotonic() + 5
    while process_cpu_s(p.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.01)  # reaped above; the pid is gone at once on Linux
    assert process_cpu_s(p.pid) is None
    account = CpuAccount({"g": {"gone": p.pid}})
    account.start()
    account.stop()
    assert account.used("g") is None
    assert account.used("no such group") is None
