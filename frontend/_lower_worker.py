"""Worker process for :class:`m100.frontend.onnx_import._Worker`: runs torch-mlir lowerings in isolation.

Reads length-prefixed pickles ``(model_bytes, name, generic, split)`` from stdin, writes
``("ok", text, cpu_s)`` (``("ok", (text, blobs), cpu_s)`` when ``split``) or
``("err", one_line_message, cpu_s)`` back (``cpu_s``: the worker's CPU time for the request); exits
on EOF. A crash inside torch-mlir kills
only this process; the parent reports it as a one-line FrontendError.
"""

from __future__ import annotations

import pickle
import struct
import sys
import time


def main() -> None:
    import onnx

    from m100.frontend.onnx_import import FrontendError, _one_line, lower_in_process

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        (n,) = struct.unpack("<Q", head)
        cpu0 = time.process_time()
        model_bytes, name, generic, split = pickle.loads(inp.read(n))
        try:
            model = onnx.ModelProto.FromString(model_bytes)
            reply = ("ok", lower_in_process(model, name, generic, split))
        except FrontendError as e:
            reply = ("err", str(e))
        except Exception as e:  # noqa: BLE001 - any failure becomes a message, never a dead worker
            reply = ("err", f"{name}: torch-mlir lowering failed: {_one_line(e, 200)}")
        data = pickle.dumps((*reply, time.process_time() - cpu0), protocol=5)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()


if __name__ == "__main__":
    main()
