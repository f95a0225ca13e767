"""exit_code.py N CMD ARGS...: run CMD (stdout/stderr discarded) and fail unless it exits with N."""
import subprocess
import sys

want = int(sys.argv[1])
got = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if got != want:
    sys.exit(f"{' '.join(sys.argv[2:])}: exit code {got}, expected {want}")
