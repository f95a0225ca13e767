"""A program's segments (its weights and constants) into a fresh :class:`~m100.sim.memory.Memory`.

What: :func:`load` writes ``Program.segments`` into their spaces as ``Memory.write_bytes`` of
each, in order, would -- the same bytes, the same ``writes`` count -- except that a DDR segment
read from a program file (``Segment.file_source``) whose bytes start in the file at an offset
congruent to its address modulo the page (the file's padding, ``program.SEGMENT_ALIGN``) has its
whole pages mapped from the file (:func:`mempool.map_file`: private, copy-on-write) and only its
first and last partial pages written. :func:`changed_file` says whether a mapped file was written
since its program was read (``Simulator.run`` asks after each run).

Why: a first run of a program made ~25 000 pages of fresh memory for ResNet-50's ~100 MB of
weights -- each zeroed by the kernel and then overwritten with the bytes (``MADV_POPULATE_WRITE``
and a copy), 0.05-0.45 CPU-s by the machine's state -- and every later run zeroed and copied them
again (the pool's ``memset``). The file's pages are in the page cache already (``Program.load``
read them): mapping them costs a page-table entry each.

Preconditions: the memory is fresh (nothing written since it was made). Postconditions: every
byte of every space reads as after ``write_bytes`` of each segment in order; a mapped range is
whole pages inside one segment, kept in ``mempool`` (the pool makes it anonymous again before a
mapping is reused); each mapped file is held open in ``Memory.files`` while the memory lives. A
file is mapped only while it is the file its program was read from (``ProgramFile.open``: device,
inode, size, modification and change times); a file written after that is not mapped (the bytes
read are written), and one written while mapped makes the run an error (``Simulator._check_files``),
never a result. Options: ``mempool.MAP_FILES`` False writes every segment (the tests compare).
"""

from __future__ import annotations

import os

import numpy as np

from m100.targets.m100.isa import Space

from . import mempool, race_batch


class _OpenFile:
    """A file descriptor, closed when the object goes (a memory's mapped program file)."""
    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def __del__(self) -> None:
        if os is not None:  # (at the interpreter's exit the module may be gone)
            try:
                os.close(self.fd)
            except OSError:  # pragma: no cover - closed already
                pass


def _file_fd(memory, file) -> int | None:
    """A descriptor of program file ``file`` kept open in ``memory.files`` (None when the file
    is not the one read any more)."""
    got = memory.files.get(file)
    if got is None:
        fd = file.open()
        got = memory.files[file] = _OpenFile(fd) if fd is not None else False
    return got.fd if got else None


def load(memory, segments) -> None:
    """Write ``segments`` (``Program.segments``) into ``memory``, mapping what may be mapped
    (the module doc)."""
    page = mempool.PAGE
    plan, rows = [], []
    for seg in segments:
        src = seg.file_source() if hasattr(seg, "file_source") else None
        a, n = seg.address, len(seg.data)
        lo, hi = -(-a // page) * page, (a + n) // page * page
        if src is not None and Space(seg.space) is Space.DDR and hi > lo and a >= 0 \
                and (src.offset - a) % page == 0 and mempool.MAP_FILES:
            fd = _file_fd(memory, src.file)
            space = memory.space(Space.DDR, 0)
            if fd is not None and space.whole and hi <= space.size:
                plan.append((seg, (space, lo, hi, fd, src.offset + lo - a)))
                code = race_batch.space_code((int(Space.DDR), 0))
                rows += [(code, a, lo), (code, hi, a + n)]
                continue
        plan.append((seg, None))
        rows.append((race_batch.space_code((int(seg.space), 0)), a, a + n))
    if rows:  # (before any file is mapped: the pages backed here are not the file's)
        memory.prefault(np.array(rows, dtype=np.int64))
    for seg, m in plan:
        if m is not None and mempool.map_file(m[0].buf, m[1], m[2], m[3], m[4]):
            memory.writes += 1
            space, lo, hi, a = m[0], m[1], m[2], seg.address
            raw = np.frombuffer(seg.data, dtype=np.uint8)
            space.write_range(a, raw[:lo - a])
            space.write_range(hi, raw[hi - a:])
        else:
            memory.write_bytes(seg.space, 0, seg.address, seg.data)


def changed_file(files: dict):
    """The first file of ``files`` (``Memory.files``) whose open file's identity is not the one
    read (``ProgramFile.ident``), else None: a file written while its pages were mapped may
    have changed bytes a run read."""
    for file, got in files.items():
        if got:
            try:
                if file.ident_of(os.fstat(got.fd)) != file.ident:
                    return file
            except OSError:  # pragma: no cover - fstat of an open descriptor
                return file
    return None
