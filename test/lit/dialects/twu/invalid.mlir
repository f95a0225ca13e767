// RUN: m100-opt %s --split-input-file --parsing-diagnostics | filecheck %s
// Every #twu attribute verifier rejects a malformed attribute with a clear message.

"test.op"() {w = #twu.walk<hbsm[0], 0, f32, [(0, 64, 4031)]>} : () -> ()
// CHECK: #twu.walk: level Level(initial=0, step=64, final=4031): final - initial must be a non-negative multiple of step

// -----

"test.op"() {w = #twu.walk<hbsm[0], 0, f32, [(5, 0, 0)]>} : () -> ()
// CHECK: #twu.walk: repeat level Level(initial=5, step=0, final=0): final (the repeat count) must be >= 1

// -----

"test.op"() {w = #twu.walk<flash, 0, f32, []>} : () -> ()
// CHECK: #twu.walk: unknown memory space 'flash' (ddr, sram, hbsm)

// -----

"test.op"() {w = #twu.walk<ddr, 0, f64, []>} : () -> ()
// CHECK: element type f64 is not an M100 element type (i4, i8, i16, i32, f16, bf16, f32)

// -----

"test.op"() {w = #twu.walk<ddr, -4, f32, []>} : () -> ()
// CHECK: #twu.walk: tpb and base must be >= 0

// -----

"test.op"() {a = #twu.access<affine_map<(d0, d1) -> (d1, d0)>, [64]>} : () -> ()
// CHECK: #twu.access: the map has 2 dims but 1 bounds are given

// -----

"test.op"() {a = #twu.access<affine_map<(d0) -> (d0)>, [0]>} : () -> ()
// CHECK: #twu.access: bounds [0] must all be >= 1

// -----

"test.op"() {a = #twu.access<affine_map<(d0)[s0] -> (d0 + s0)>, [4]>} : () -> ()
// CHECK: #twu.access: the map may not use symbols
