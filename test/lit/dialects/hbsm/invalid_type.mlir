// RUN: m100-opt %s --split-input-file --parsing-diagnostics | filecheck %s
// Negative tests: the !hbsm.buffer type verifier (reported while parsing).

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x8xf32, slots = 0>
// CHECK: !hbsm.buffer: slots must be >= 1, not 0

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x0xf32>
// CHECK: !hbsm.buffer: every dimension must be >= 1, got [8, 0]

// -----

%a = hbsm.alloc : !hbsm.buffer<ddr[1], 8xf32>
// CHECK: !hbsm.buffer: a ddr buffer has no TPB (got 1)

// -----

%a = hbsm.alloc : !hbsm.buffer<rom, 8xf32>
// CHECK: !hbsm.buffer: unknown memory space 'rom' (ddr, sram, hbsm)

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8xi64>
// CHECK: element type i64 is not an M100 element type (i4, i8, i16, i32, f16, bf16, f32)
