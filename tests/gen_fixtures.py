"""gen_fixtures.py — regenerates every golden fixture from PyTorch.

Usage (from the source tree, with torch and numpy installed, e.g. Debian's
python3-torch, or PyTorch 2.x from PyPI in a virtual environment such as
/opt/torchenv): /usr/bin/python3 tests/gen_fixtures.py

gen_attention.py (batched matmul, masked fill, softmax over masked rows,
causal attention) was written with PyTorch 2.x.

Each tests/fixtures/gen_NAME.py writes tests/fixtures/NAME.bin; the .bin
files are committed so the tests themselves never need Python.
"""
import glob
import os
import subprocess
import sys

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
for script in sorted(glob.glob(os.path.join(here, "gen_*.py"))):
    out = os.path.join(here, os.path.basename(script)[4:-3] + ".bin")
    subprocess.run([sys.executable, script, out], check=True)
    print(f"wrote {os.path.relpath(out)} ({os.path.getsize(out)} bytes)")
