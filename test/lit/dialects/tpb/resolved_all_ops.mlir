// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s | m100-opt | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Resolved level: every tpb instruction op (all epilogue/stage/sync forms), segments, symbols, streams print back exactly; this is the canonical form m100-translate --from-bin emits.

tpb.program "tiny" resolved attributes {metadata = ["pipeline", "none", "source", "hand-written"]} {
  tpb.segment "w0" ddr 4096 data "0001020304050607"
  tpb.segment "" sram 0 data "0102"
  tpb.symbol "x" input 1x8x8x4xf16 at ddr 0
  tpb.symbol "y" output 4xf32 at hbsm[1] 128
  tpb.stream ccb {
    %0 = tpb.dma engine 0 src(#twu.walk<ddr, 4096, f32, [(0, 1, 15)]>) dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]>
    %1 = tpb.dma engine 1 src(#twu.walk<sram, 0, i8, [(0, 1, 63)]>) dst(#twu.walk<hbsm[0], 0, i8, [(0, 1, 63)]>) sync #sync.actions<blocks = 2, monitors = [#sync.monitor<tpb = 1, counter = 3, expected = 4, per_block = 2>], updates = [#sync.update<counter = 5, mask = 2, amount = 2, trigger = block>]> {tpb_mask = 3}
  }
  tpb.stream cluster 0 {
    %2 = tpb.matmul tpb 0 a(#twu.walk<hbsm[0], 0, i8, [(0, 32, 992), (0, 1, 31)]>) b(#twu.walk<hbsm[0], 1024, i4, [(0, 64, 1984), (0, 1, 63)]>) c(#twu.walk<hbsm[0], 2048, i8, [(0, 64, 1984), (0, 1, 63)]>) bias(#twu.walk<hbsm[0], 4096, i32, [(0, 1, 63)]>) per_channel(#twu.walk<hbsm[0], 4352, i32, [(0, 2, 126), (0, 1, 1)]>) sync #sync.actions<blocks = 4, monitors = [#sync.monitor<tpb = 0, counter = 1, expected = 2, per_block = 1>], updates = [#sync.update<counter = 2, mask = 3, trigger = block>]> {m = 32, n = 64, k = 32, act = "clamp", clamp_lo = -3.5, clamp_hi = 6.0, requant = array<i64: 1073741824, 31, -2, -128, 127>}
    %3 = tpb.matmul tpb 0 a(#twu.walk<hbsm[0], 0, f32, [(0, 16, 112), (0, 1, 15)]>) b(#twu.walk<hbsm[0], 512, f32, [(0, 8, 120), (0, 1, 7)]>) c(#twu.walk<hbsm[0], 1024, f32, [(0, 8, 56), (0, 1, 7)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]> {m = 8, n = 8, k = 16, accumulate, act = "gelu"}
    %4 = tpb.conv2d tpb 1 x(#twu.walk<hbsm[1], 0, f16, [(0, 1, 0), (0, 32, 224), (0, 4, 28), (0, 1, 3)]>) w(#twu.walk<hbsm[1], 1024, f16, [(0, 12, 24), (0, 4, 8), (0, 1, 0), (0, 1, 3)]>) y(#twu.walk<hbsm[1], 2048, f32, [(0, 1, 0), (0, 16, 48), (0, 4, 12), (0, 1, 3)]>) bias(#twu.walk<hbsm[1], 4096, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 2> {n = 1, h = 8, width = 8, c = 4, f = 4, kh = 3, kw = 3, stride = array<i64: 2, 2>, pad = array<i64: 1, 1, 0, 0>, groups = 4, act = "silu"}
    %5 = tpb.cvu tpb 0 in0(#twu.walk<hbsm[0], 0, f32, [(0, 16, 48), (0, 1, 15)]>) in1(#twu.walk<hbsm[0], 256, f32, [(0, 1, 15)]>) out(#twu.walk<hbsm[0], 512, bf16, [(0, 16, 48), (0, 1, 15)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]> {in_shapes = [array<i64: 4, 16>, array<i64: 16>], out_shape = array<i64: 4, 16>, stages = [#tpb.stage<add(in0, in1)>, #tpb.stage<mul(s0, -0.125)>, #tpb.stage<layernorm(s1), axis = 1, fparam = 1.0e-05>, #tpb.stage<maxpool(s2), iparams = [2, 2, 2, 2, 0, 0, 0, 0]>]}
    %6 = tpb.copy tpb 0 src(#twu.walk<hbsm[0], 0, f32, [(0, 1, 7), (0, 8, 56)]>) dst(#twu.walk<hbsm[1], 0, f16, [(0, 8, 56), (0, 1, 7)]>) sync #sync.actions<blocks = 1>
    %7 = tpb.fill tpb 0 dst(#twu.walk<hbsm[0], 0, i32, [(0, 1, 15)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]> {value = -1.0}
    %8 = tpb.broadcast tpb 1 src(#twu.walk<hbsm[1], 0, i8, [(0, 1, 63)]>) dst(#twu.walk<hbsm[1], 64, i8, [(0, 1, 63)]>) sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 1, counter = 0, expected = 1>]> {tpb_mask = 3}
    %9 = tpb.csu tpb 0 op0(#twu.walk<ddr, 0, f32, [(0, 16, 1584), (0, 1, 15)]>) op1(#twu.walk<hbsm[0], 0, i32, [(0, 1, 3)]>) op2(#twu.walk<hbsm[0], 64, f32, [(0, 16, 48), (0, 1, 15)]>) sync #sync.actions<blocks = 1> {routine = "gather", params = array<i64: 100, 16, 4>}
    %10 = tpb.csu tpb 1 op0(#twu.walk<sram, 0, i8, [(0, 1, 9)]>) op1(#twu.walk<ddr, 64, i8, [(0, 1, 9)]>) sync #sync.actions<blocks = 1> {routine = "memcpy"}
  }
}

// CHECK: builtin.module {
// CHECK-NEXT:   tpb.program "tiny" resolved attributes {{{(fingerprint = "0x[0-9a-f]+", )?}}metadata = ["pipeline", "none", "source", "hand-written"]} {
// CHECK-NEXT:     tpb.segment "w0" ddr 4096 data "0001020304050607"
// CHECK-NEXT:     tpb.segment "" sram 0 data "0102"
// CHECK-NEXT:     tpb.symbol "x" input 1x8x8x4xf16 at ddr 0
// CHECK-NEXT:     tpb.symbol "y" output 4xf32 at hbsm[1] 128
// CHECK-NEXT:     tpb.stream ccb {
// CHECK-NEXT:       %0 = tpb.dma engine 0 src(#twu.walk<ddr, 4096, f32, [(0, 1, 15)]>) dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]>
// CHECK-NEXT:       %1 = tpb.dma engine 1 src(#twu.walk<sram, 0, i8, [(0, 1, 63)]>) dst(#twu.walk<hbsm[0], 0, i8, [(0, 1, 63)]>) sync #sync.actions<blocks = 2, monitors = [#sync.monitor<tpb = 1, counter = 3, expected = 4, per_block = 2>], updates = [#sync.update<counter = 5, mask = 2, amount = 2, trigger = block>]> {tpb_mask = 3}
// CHECK-NEXT:     }
// CHECK-NEXT:     tpb.stream cluster 0 {
// CHECK-NEXT:       %2 = tpb.matmul tpb 0 a(#twu.walk<hbsm[0], 0, i8, [(0, 32, 992), (0, 1, 31)]>) b(#twu.walk<hbsm[0], 1024, i4, [(0, 64, 1984), (0, 1, 63)]>) c(#twu.walk<hbsm[0], 2048, i8, [(0, 64, 1984), (0, 1, 63)]>) bias(#twu.walk<hbsm[0], 4096, i32, [(0, 1, 63)]>) per_channel(#twu.walk<hbsm[0], 4352, i32, [(0, 2, 126), (0, 1, 1)]>) sync #sync.actions<blocks = 4, monitors = [#sync.monitor<tpb = 0, counter = 1, expected = 2, per_block = 1>], updates = [#sync.update<counter = 2, mask = 3, trigger = block>]> {m = 32, n = 64, k = 32, act = "clamp", clamp_lo = -3.5, clamp_hi = 6.0, requant = array<i64: 1073741824, 31, -2, -128, 127>}
// CHECK-NEXT:       %3 = tpb.matmul tpb 0 a(#twu.walk<hbsm[0], 0, f32, [(0, 16, 112), (0, 1, 15)]>) b(#twu.walk<hbsm[0], 512, f32, [(0, 8, 120), (0, 1, 7)]>) c(#twu.walk<hbsm[0], 1024, f32, [(0, 8, 56), (0, 1, 7)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]> {m = 8, n = 8, k = 16, accumulate, act = "gelu"}
// CHECK-NEXT:       %4 = tpb.conv2d tpb 1 x(#twu.walk<hbsm[1], 0, f16, [(0, 1, 0), (0, 32, 224), (0, 4, 28), (0, 1, 3)]>) w(#twu.walk<hbsm[1], 1024, f16, [(0, 12, 24), (0, 4, 8), (0, 1, 0), (0, 1, 3)]>) y(#twu.walk<hbsm[1], 2048, f32, [(0, 1, 0), (0, 16, 48), (0, 4, 12), (0, 1, 3)]>) bias(#twu.walk<hbsm[1], 4096, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 2> {n = 1, h = 8, width = 8, c = 4, f = 4, kh = 3, kw = 3, stride = array<i64: 2, 2>, pad = array<i64: 1, 1, 0, 0>, groups = 4, act = "silu"}
// CHECK-NEXT:       %5 = tpb.cvu tpb 0 in0(#twu.walk<hbsm[0], 0, f32, [(0, 16, 48), (0, 1, 15)]>) in1(#twu.walk<hbsm[0], 256, f32, [(0, 1, 15)]>) out(#twu.walk<hbsm[0], 512, bf16, [(0, 16, 48), (0, 1, 15)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]> {in_shapes = [array<i64: 4, 16>, array<i64: 16>], out_shape = array<i64: 4, 16>, stages = [#tpb.stage<add(in0, in1)>, #tpb.stage<mul(s0, -0.125)>, #tpb.stage<layernorm(s1), axis = 1, fparam = 1.0e-05>, #tpb.stage<maxpool(s2), iparams = [2, 2, 2, 2, 0, 0, 0, 0]>]}
// CHECK-NEXT:       %6 = tpb.copy tpb 0 src(#twu.walk<hbsm[0], 0, f32, [(0, 1, 7), (0, 8, 56)]>) dst(#twu.walk<hbsm[1], 0, f16, [(0, 8, 56), (0, 1, 7)]>) sync #sync.actions<blocks = 1>
// CHECK-NEXT:       %7 = tpb.fill tpb 0 dst(#twu.walk<hbsm[0], 0, i32, [(0, 1, 15)]>) sync #sync.actions<blocks = 1, updates = [#sync.update<counter = 0, mask = 1>]> {value = -1.0}
// CHECK-NEXT:       %8 = tpb.broadcast tpb 1 src(#twu.walk<hbsm[1], 0, i8, [(0, 1, 63)]>) dst(#twu.walk<hbsm[1], 64, i8, [(0, 1, 63)]>) sync #sync.actions<blocks = 1, monitors = [#sync.monitor<tpb = 1, counter = 0, expected = 1>]> {tpb_mask = 3}
// CHECK-NEXT:       %9 = tpb.csu tpb 0 op0(#twu.walk<ddr, 0, f32, [(0, 16, 1584), (0, 1, 15)]>) op1(#twu.walk<hbsm[0], 0, i32, [(0, 1, 3)]>) op2(#twu.walk<hbsm[0], 64, f32, [(0, 16, 48), (0, 1, 15)]>) sync #sync.actions<blocks = 1> {routine = "gather", params = array<i64: 100, 16, 4>}
// CHECK-NEXT:       %10 = tpb.csu tpb 1 op0(#twu.walk<sram, 0, i8, [(0, 1, 9)]>) op1(#twu.walk<ddr, 64, i8, [(0, 1, 9)]>) sync #sync.actions<blocks = 1> {routine = "memcpy"}
// CHECK-NEXT:     }
// CHECK-NEXT:   }
// CHECK-NEXT: }

// IR -> binary -> IR and IR -> asm -> IR are exact:
// RUN: m100-translate %s --to-bin -o %t.m100 && m100-translate --from-bin %t.m100 | filecheck %s
// RUN: m100-translate %s --to-asm -o %t.asm && m100-translate --from-asm %t.asm | filecheck %s
