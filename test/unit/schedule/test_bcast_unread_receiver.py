"""A DRB broadcast's receiver that no instruction reads still holds the broadcast's bytes from the
broadcast on (``hbsm-allocate``: the receivers of one ``m100.bcast`` group share one offset; a
member nobody names had its alloc's place -- the head of the program -- as its whole lifetime,
so the group's offset could sit on a buffer live on that TPB when the broadcast writes it). The
fuzzer's W8A8 attention chain with ``list_schedule.ACT_PREFETCH`` (``--family quant-attention
--seed 29`` #813, ``test_fuzz_attention_cases``): a head's kT broadcast to 12 TPBs of which 6 read
their own causal-clipped copies, prefetched while the projection before still read its A tiles
there; the dataflow check named the matmuls reading ``kT`` bytes for their ``x`` tiles.

Oracle: the bytes the program writes and reads, here by hand: the broadcast writes the group's
offset on every TPB of its mask, so on TPB 1 it must not meet ``%x`` (live from the load before
it to the copy after it)."""

from __future__ import annotations

TEXT = """
    tpb.program "tiny" placed {
      %in = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 1000xf32>
      %r0 = hbsm.alloc {m100.bcast = 1 : i64} : !hbsm.buffer<hbsm[0], 1000xf32>
      %r1 = hbsm.alloc {m100.bcast = 1 : i64} : !hbsm.buffer<hbsm[1], 1000xf32>
      %x = hbsm.alloc : !hbsm.buffer<hbsm[1], 1000xf32>
      %y = hbsm.alloc : !hbsm.buffer<hbsm[1], 1000xf32>
      %z = hbsm.alloc : !hbsm.buffer<hbsm[0], 1000xf32>
      %w = hbsm.alloc : !hbsm.buffer<hbsm[0], 1000xf32>
      %t0 = tpb.copy tpb 0 src(%z) dst(%w)
      %t1 = tpb.dma engine 0 src(%in) dst(%x) after(%t0)
      %t2 = tpb.dma engine 1 src(%in) dst(%r0) after(%t1) {tpb_mask = 3}
      %t3 = tpb.copy tpb 0 src(%r0) dst(%z) after(%t2)
      %t4 = tpb.copy tpb 1 src(%x) dst(%y) after(%t3)
    }
    """


def test_unread_broadcast_receiver_keeps_the_bytes_from_the_broadcast_on():
    from xdsl.parser import Parser

    from m100.context import make_context
    from m100.passes.backend.hbsm_allocate import HbsmAllocate

    mod = Parser(make_context(), TEXT).parse_module()
    HbsmAllocate().apply(make_context(), mod)
    allocs = {o.results[0].name_hint: o for o in mod.walk() if o.name == "hbsm.alloc"}
    off = {n: o.offset.value.data for n, o in allocs.items()}
    size = 4000
    assert off["r0"] == off["r1"]  # one offset: the broadcast writes it on TPBs 0 and 1
    # %x is live on TPB 1 from t1 to t4, across the broadcast t2: apart from the group's bytes
    assert off["x"] + size <= off["r1"] or off["r1"] + size <= off["x"], off


def test_the_checker_derives_the_receivers_from_the_mask(monkeypatch):
    """The mutant: the receivers' spans as before the fix (``receiver_spans`` a no-op: the unread
    receiver lives at its alloc's place only). The allocator then packs ``%r1`` on ``%x``'s bytes
    and ``hbsm_pack.check_allocation``, which sees the allocator's spans, accepts it; the
    broadcast check (``check_receivers``: the mask's TPBs, the program's own positions) names the
    broadcast and ``%x``, and the pass fails (one clear error) instead of emitting a wrong program."""
    import pytest
    from xdsl.parser import Parser

    from m100.context import make_context
    from m100.passes.backend import hbsm_allocate, hbsm_pack

    seen = []
    check = hbsm_pack.check_allocation

    def spy(bufs, offs, *a):
        errs = check(bufs, offs, *a)
        seen.append((offs, list(errs)))
        return errs

    monkeypatch.setattr(hbsm_allocate, "receiver_spans", lambda *a: None)
    monkeypatch.setattr(hbsm_allocate, "check_allocation", spy)
    mod = Parser(make_context(), TEXT).parse_module()
    with pytest.raises(hbsm_pack.HbsmCheckError, match=r"TPB 1: the broadcast at instruction 2 .*%x") \
            as e:
        hbsm_allocate.HbsmAllocate().apply(make_context(), mod)
    # (not an overflow: m100-pipeline would schedule again with a smaller share and hide it)
    assert not isinstance(e.value, hbsm_pack.HbsmOverflow)
    (offs, errs), = seen
    r1 = next(v for n, v in offs.items() if n.startswith("%r1"))
    x = next(v for n, v in offs.items() if n.startswith("%x"))
    assert abs(r1 - x) < 4000 and errs == [], (offs, errs)  # (the mutant's case: missed there)
