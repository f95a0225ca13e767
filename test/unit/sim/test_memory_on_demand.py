"""Data spaces mapped on demand (``sim/memory.py``: ``FlatBytes(whole=False)``, the fallback when
the process may not map a whole 64 GiB DDR, e.g. under ``ulimit -v``) hold the same bytes as a
plain numpy array written by the definition, and a program on the full m100 machine runs under an
address-space limit far below its DDR with the outputs of an unlimited run."""

import subprocess
import sys
import textwrap

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from m100.sim import memory
from m100.sim.memory import FlatBytes, Memory
from m100.targets.m100.isa import DType, Dma, MatMul, Monitor, Space, Sync, Update, Walk, mask_of
from m100.targets.m100.machine import get_machine
from m100.targets.m100.program import CCB_STREAM, Program, Segment, Symbol

SIZE = 1 << 16
op = st.tuples(st.sampled_from(["write", "read", "view", "gather", "scatter"]),
               st.integers(0, SIZE - 1), st.integers(1, 3000), st.integers(0, 2 ** 32 - 1))


@settings(max_examples=80, deadline=None)
@given(st.lists(op, min_size=1, max_size=30))
def test_on_demand_bytes_equal_a_plain_array(ops):
    old = memory.GROW_MIN
    memory.GROW_MIN = 512  # grow often
    try:
        fb, want = FlatBytes(SIZE, whole=False), np.zeros(SIZE, dtype=np.uint8)
        assert fb.mapped == 0
        for kind, lo, n, seed in ops:
            hi = min(SIZE, lo + n)
            rng = np.random.default_rng(seed)
            if kind == "write":
                data = rng.integers(0, 256, hi - lo, dtype=np.uint8)
                fb.write_range(lo, data)
                want[lo:hi] = data
            elif kind in ("read", "view"):
                got = fb.read_range(lo, hi) if kind == "read" else fb.view_range(lo, hi)
                assert got.tobytes() == want[lo:hi].tobytes()
            else:
                addrs = rng.integers(lo, hi, max(1, (hi - lo) // 3))
                if kind == "gather":
                    assert fb.gather(addrs).tobytes() == want[addrs].tobytes()
                else:
                    data = rng.integers(0, 256, addrs.size, dtype=np.uint8)
                    fb.scatter(addrs, data)
                    want[addrs] = data
            assert fb.mapped <= SIZE
            for a, b, buf in zip(fb._lo, fb._hi, fb._buf):  # disjoint, apart, granule-aligned
                assert a % 512 == 0 and (b % 512 == 0 or b == SIZE) and buf.size == b - a
                assert buf.tobytes() == want[a:b].tobytes()
            assert all(b < a for a, b in zip(fb._lo[1:], fb._hi))
        assert fb.read_range(0, SIZE).tobytes() == want.tobytes()
    finally:
        memory.GROW_MIN = old


def matmul_program(machine, x_at: int):
    """x (input, DDR at ``x_at``) -> HBSM; w (segment) -> HBSM; y = x @ w (i32) -> DDR."""
    m, k, n = 8, 16, 8
    p = Program.empty(machine)
    X = Walk.strided(Space.HBSM, 3, 0, DType.I8, (m, k))
    W = Walk.strided(Space.HBSM, 3, 1024, DType.I8, (k, n))
    Y = Walk.strided(Space.HBSM, 3, 2048, DType.I32, (m, n))
    ddr = lambda a, dt, shape: Walk.strided(Space.DDR, 0, a, dt, shape)  # noqa: E731
    w = (np.arange(k * n).reshape(k, n) % 11 - 5).astype(np.int8)
    p.streams = {
        CCB_STREAM: [Dma(0, ddr(x_at, DType.I8, (m, k)), X, sync=Sync(updates=(Update(0, mask_of(3)),))),
                     Dma(1, ddr(0x2000, DType.I8, (k, n)), W, sync=Sync(updates=(Update(0, mask_of(3)),))),
                     Dma(0, Y, ddr(x_at + 0x1000, DType.I32, (m, n)),
                         sync=Sync(monitors=(Monitor(3, 1, 1),)))],
        machine.cluster_of(3): [MatMul(3, X, W, Y, m, n, k, sync=Sync(
            monitors=(Monitor(3, 0, 2),), updates=(Update(1, mask_of(3)),)))]}
    p.segments = [Segment(Space.DDR, 0x2000, w.tobytes(), "w")]
    p.symbols = [Symbol("x", "input", (m, k), DType.I8, Space.DDR, x_at),
                 Symbol("y", "output", (m, n), DType.I32, Space.DDR, x_at + 0x1000)]
    return p, w


def test_program_on_demand_equals_whole(monkeypatch):
    from m100.sim import simulate

    p, w = matmul_program(get_machine("m100"), 5 << 30)  # 5 GiB into the DDR
    x = np.random.default_rng(0).integers(-128, 128, (8, 16)).astype(np.int8)
    whole = simulate(p, {"x": x})
    assert Memory(get_machine("m100")).space(Space.DDR).mapped == 64 << 30  # mapped whole
    monkeypatch.setattr(memory, "WHOLE", False)
    part = simulate(p, {"x": x})
    assert np.array_equal(whole.outputs["y"], x.astype(np.int64) @ w.astype(np.int64))
    assert part.outputs["y"].tobytes() == whole.outputs["y"].tobytes()
    assert part.stats == whole.stats and not part.reports
    ddr = Memory(get_machine("m100")).space(Space.DDR)
    ddr.write_range(5 << 30, np.ones(8, dtype=np.uint8))
    assert ddr.mapped == memory.GROW_MIN  # one granule of 64 GiB


def test_full_machine_runs_under_an_address_space_limit(tmp_path):
    """``ulimit -v`` of 4 GiB (the DDR is 64 GiB): the run maps its DDR on demand."""
    p, w = matmul_program(get_machine("m100"), 5 << 30)
    p.save(tmp_path / "p.m100")
    x = np.random.default_rng(1).integers(-128, 128, (8, 16)).astype(np.int8)
    np.savez(tmp_path / "in.npz", x=x)
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from m100.tools.m100_sim import main
        sys.exit(main([{str(tmp_path / 'p.m100')!r}, "--inputs", {str(tmp_path / 'in.npz')!r},
                       "--outputs", {str(tmp_path / 'out.npz')!r}]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                            "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    out = np.load(tmp_path / "out.npz")
    assert np.array_equal(out["y"], x.astype(np.int64) @ w.astype(np.int64))
