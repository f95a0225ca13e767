// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s | m100-opt | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Worked example 2 of docs/dialects.md (resolved level, buffers kept next to the walks).

tpb.program "tiny" resolved {
  tpb.symbol "a" input 64x32xf32 at ddr 0
  tpb.symbol "c" output 64x64xf32 at ddr 16384
  tpb.segment "w" ddr 65536 data "0000803f0000803f"
  %A = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 64x32xf32>
  %C = hbsm.alloc offset 16384 : !hbsm.buffer<ddr, 64x64xf32>
  %W = hbsm.alloc offset 65536 : !hbsm.buffer<ddr, 32x64xf32>
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 64x32xf32>
  %b = hbsm.alloc offset 8192 : !hbsm.buffer<hbsm[0], 32x64xf32>
  %c = hbsm.alloc offset 16384 : !hbsm.buffer<hbsm[0], 64x64xf32>
  %ct = hbsm.fifo producer 0 consumers [1] offset 0 : !hbsm.buffer<hbsm[1], 64x64xf32, slots = 2>
  tpb.stream ccb {
    %t0 = tpb.dma engine 0 src(%A, #twu.walk<ddr, 0, f32, [(0, 1, 2047)]>) dst(%a, #twu.walk<hbsm[0], 0, f32, [(0, 1, 2047)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]>
    %t1 = tpb.dma engine 1 src(%W, #twu.walk<ddr, 65536, f32, [(0, 1, 2047)]>) dst(%b, #twu.walk<hbsm[0], 8192, f32, [(0, 1, 2047)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]>
    %t4 = tpb.dma engine 0 src(%ct, #twu.walk<hbsm[1], 0, f32, [(0, 1, 4095)]>) dst(%C, #twu.walk<ddr, 16384, f32, [(0, 1, 4095)]>) sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 1, counter = 0, expected = 1>]>
  }
  tpb.stream cluster 0 {
    %t2 = tpb.matmul tpb 0 a(%a, #twu.walk<hbsm[0], 0, f32, [(0, 1, 2047)]>) b(%b, #twu.walk<hbsm[0], 8192, f32, [(0, 1, 2047)]>) c(%c, #twu.walk<hbsm[0], 16384, f32, [(0, 1, 4095)]>) sync #sync.actions<blocks = 2, monitors = [#sync.monitor<tpb = 0, counter = 0, expected = 2>], updates = [#sync.update<counter = 1, mask = 1, trigger = block>]> {m = 64, n = 64, k = 32, act = "relu"}
    %t3 = tpb.copy tpb 0 src(%c, #twu.walk<hbsm[0], 16384, f32, [(0, 1, 63), (0, 64, 4032)]>) dst(%ct, #twu.walk<hbsm[1], 0, f32, [(0, 1, 4095)]>) sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 0, counter = 1, expected = 2>], updates = [#sync.update<counter = 0, mask = 2>]>
  }
}

// CHECK: builtin.module {
// CHECK-NEXT:   tpb.program "tiny" resolved {
// CHECK-NEXT:     tpb.symbol "a" input 64x32xf32 at ddr 0
// CHECK-NEXT:     tpb.symbol "c" output 64x64xf32 at ddr 16384
// CHECK-NEXT:     tpb.segment "w" ddr 65536 data "0000803f0000803f"
// CHECK-NEXT:     %A = hbsm.alloc offset 0 : !hbsm.buffer<ddr, 64x32xf32>
// CHECK-NEXT:     %C = hbsm.alloc offset 16384 : !hbsm.buffer<ddr, 64x64xf32>
// CHECK-NEXT:     %W = hbsm.alloc offset 65536 : !hbsm.buffer<ddr, 32x64xf32>
// CHECK-NEXT:     %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 64x32xf32>
// CHECK-NEXT:     %b = hbsm.alloc offset 8192 : !hbsm.buffer<hbsm[0], 32x64xf32>
// CHECK-NEXT:     %c = hbsm.alloc offset 16384 : !hbsm.buffer<hbsm[0], 64x64xf32>
// CHECK-NEXT:     %ct = hbsm.fifo producer 0 consumers [1] offset 0 : !hbsm.buffer<hbsm[1], 64x64xf32, slots = 2>
// CHECK-NEXT:     tpb.stream ccb {
// CHECK-NEXT:       %t0 = tpb.dma engine 0 src(%A, #twu.walk<ddr, 0, f32, [(0, 1, 2047)]>) dst(%a, #twu.walk<hbsm[0], 0, f32, [(0, 1, 2047)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]>
// CHECK-NEXT:       %t1 = tpb.dma engine 1 src(%W, #twu.walk<ddr, 65536, f32, [(0, 1, 2047)]>) dst(%b, #twu.walk<hbsm[0], 8192, f32, [(0, 1, 2047)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]>
// CHECK-NEXT:       %t4 = tpb.dma engine 0 src(%ct, #twu.walk<hbsm[1], 0, f32, [(0, 1, 4095)]>) dst(%C, #twu.walk<ddr, 16384, f32, [(0, 1, 4095)]>) sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 1, counter = 0, expected = 1>]>
// CHECK-NEXT:     }
// CHECK-NEXT:     tpb.stream cluster 0 {
// CHECK-NEXT:       %t2 = tpb.matmul tpb 0 a(%a, #twu.walk<hbsm[0], 0, f32, [(0, 1, 2047)]>) b(%b, #twu.walk<hbsm[0], 8192, f32, [(0, 1, 2047)]>) c(%c, #twu.walk<hbsm[0], 16384, f32, [(0, 1, 4095)]>) sync #sync.actions<blocks = 2, monitors = [#sync.monitor<tpb = 0, counter = 0, expected = 2>], updates = [#sync.update<counter = 1, mask = 1, trigger = block>]> {m = 64, n = 64, k = 32, act = "relu"}
// CHECK-NEXT:       %t3 = tpb.copy tpb 0 src(%c, #twu.walk<hbsm[0], 16384, f32, [(0, 1, 63), (0, 64, 4032)]>) dst(%ct, #twu.walk<hbsm[1], 0, f32, [(0, 1, 4095)]>) sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 0, counter = 1, expected = 2>], updates = [#sync.update<counter = 0, mask = 2>]>
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT: }

// It translates to ISA (buffers are IR-only and dropped):
// RUN: m100-translate %s --to-asm | filecheck %s --check-prefix=ASM
// ASM: .ccb
// ASM-NEXT: ccb.dma engine=0 src=ddr@0x0:f32[(0,1,2047)] dst=hbsm0@0x0:f32[(0,1,2047)]
// ASM: .cluster 0
// ASM-NEXT: tcu.matmul tpb=0
// ASM-NEXT: dtdu.copy tpb=0 src=hbsm0@0x4000:f32[(0,1,63),(0,64,4032)] dst=hbsm1@0x0:f32[(0,1,4095)]
