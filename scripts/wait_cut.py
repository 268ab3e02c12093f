"""Demo helper: wait until the replica cluster's stable cut reaches the txlog end offsets,
or (with --held-by NODE) until the status names NODE as holding the cut back."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from tidemark.log.offsets import end_offsets
from tidemark.log.settings import load_settings


def status() -> dict:
    out = subprocess.run([sys.executable, "-m", "tidemark", "replica", "status", "--json"],
                         capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--held-by", default=None)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    deadline = time.monotonic() + args.timeout
    ends = end_offsets(load_settings(), "txlog")
    while time.monotonic() < deadline:
        st = status()
        ust = st.get("ust", {})
        if args.held_by:
            held = st.get("held_back_by") or {}
            if held.get("node") == args.held_by:
                print(f"cut held back by {held['node']} for {held.get('seconds', 0):.1f} s")
                return 0
        elif ust and all(ust.get(f"txlog/{p}", -1) >= o for p, o in ends.items()):
            print(f"stable cut reached the txlog end offsets ({sum(ends.values())} records)")
            return 0
        time.sleep(0.5)
    print("timed out waiting for the stable cut", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
