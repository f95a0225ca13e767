// RUN: m100-opt %s -p sync-insert | filecheck %s
// RUN: m100-opt %s -p 'sync-insert{sync-mode=barrier-all}' | filecheck %s --check-prefix=BAR
// RUN: m100-opt %s -p 'sync-insert{report=true}' -o /dev/null 2>&1 | filecheck %s --check-prefix=REP
// RUN: m100-opt %s -p 'sync-insert{certificate="%t.json"}' -o /dev/null && filecheck %s --check-prefix=CERT < %t.json
// Whole chain: sync-insert -> resolved -> assembly -> the interpreter with race checks and random
// latencies, in both modes.
// RUN: m100-opt %s -p sync-insert | m100-translate --to-asm -o %t.asm
// RUN: m100-sim %t.asm --random-latency 7 | filecheck %s --check-prefix=SIM
// RUN: m100-opt %s -p 'sync-insert{sync-mode=barrier-all}' | m100-translate --to-asm -o %t.bar.asm
// RUN: m100-sim %t.bar.asm --random-latency 7 | filecheck %s --check-prefix=SIM

// DMA in (engine 0, 4 blocks) -> CVU add on TPB 0 streaming behind it (4 blocks) -> remote copy
// to TPB 1 (4 blocks) -> DMA out; plus a weight DMA on engine 1 that only the CVU needs.
tpb.program "tiny" placed {
  %t0 = tpb.dma engine 0 src(#twu.walk<ddr, 0, f32, [(0, 1, 1023)]>) dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 1023)]>) sync #sync.actions<blocks = 4>
  %t1 = tpb.dma engine 1 src(#twu.walk<ddr, 8192, f32, [(0, 1, 1023)]>) dst(#twu.walk<hbsm[0], 4096, f32, [(0, 1, 1023)]>)
  %t2 = tpb.cvu tpb 0 in0(#twu.walk<hbsm[0], 0, f32, [(0, 1, 1023)]>) in1(#twu.walk<hbsm[0], 4096, f32, [(0, 1, 1023)]>) out(#twu.walk<hbsm[0], 8192, f32, [(0, 1, 1023)]>) sync #sync.actions<blocks = 4> {in_shapes = [array<i64: 32, 32>, array<i64: 32, 32>], out_shape = array<i64: 32, 32>, stages = [#tpb.stage<add(in0, in1)>]}
  %t3 = tpb.copy tpb 0 src(#twu.walk<hbsm[0], 8192, f32, [(0, 1, 1023)]>) dst(#twu.walk<hbsm[1], 0, f32, [(0, 1, 1023)]>) sync #sync.actions<blocks = 4>
  %t4 = tpb.dma engine 0 src(#twu.walk<hbsm[1], 0, f32, [(0, 1, 1023)]>) dst(#twu.walk<ddr, 16384, f32, [(0, 1, 1023)]>)
}

// The input DMA signals TPB 0 per block; the CVU streams one block behind it and waits for the
// whole weight DMA; the copy streams behind the CVU; the output DMA (which may monitor any TPB)
// waits for the end of the copy on a counter of the copy's TPB. Counters are reused: a counter's
// expected values continue where its previous hand-offs ended.
// CHECK: tpb.dma engine 0 {{.*}} sync #sync.actions<blocks = 4, updates = [#sync.update<counter = [[IN:[0-9]+]], mask = 1, trigger = block>]>
// CHECK: tpb.dma engine 1 {{.*}} sync #sync.actions<blocks = 1, updates = [#sync.update<counter = [[W:[0-9]+]], mask = 1>]>
// CHECK: tpb.cvu tpb 0 {{.*}} sync #sync.actions<blocks = 4, monitors = [#sync.monitor<tpb = 0, counter = [[IN]], expected = 1, per_block = 1>, #sync.monitor<tpb = 0, counter = [[W]], expected = 1>], updates = [#sync.update<counter = [[C:[0-9]+]], mask = 1, trigger = block>]>
// CHECK: tpb.copy tpb 0 {{.*}} sync #sync.actions<blocks = 4, monitors = [#sync.monitor<tpb = 0, counter = [[C]], expected = {{[0-9]+}}, per_block = 1>], updates = [#sync.update<counter = [[R:[0-9]+]], mask = 1>]>
// CHECK: tpb.dma engine 0 {{.*}} sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 0, counter = [[R]], expected = {{[0-9]+}}>]>

// barrier-all: every op waits for the whole previous one; no per-block traffic.
// BAR-NOT: trigger = block
// BAR-NOT: per_block
// BAR: tpb.dma engine 1 {{.*}}monitors = [#sync.monitor<tpb = {{[01]}}, counter = {{[0-9]+}}, expected = 1>]

// REP: sync-insert (dataflow): 5 instructions, {{[0-9]+}} orderings needed
// REP: counters per TPB: TPB0=2

// CERT: "format": "m100-sync-certificate"
// CERT: "sync_mode": "dataflow"

// SIM: m100-sim: 5/5 instructions
