"""Damage a file: corrupt.py IN OUT (truncate N | flip OFFSET | append N | garbage N SEED).

Negative N / OFFSET count from the end of the file."""
import random
import sys

src, dst, how, *args = sys.argv[1:]
data = bytearray(open(src, "rb").read())
if how == "truncate":
    n = int(args[0])
    data = data[:n if n >= 0 else len(data) + n]
elif how == "flip":
    data[int(args[0])] ^= 0xFF
elif how == "append":
    data += bytes(int(args[0]))
elif how == "garbage":
    data = bytearray(random.Random(int(args[1])).randbytes(int(args[0])))
else:
    sys.exit(f"unknown mode {how}")
open(dst, "wb").write(data)
