// RUN: m100-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Negative tests: every hbsm op verifier.

tpb.program "tiny" placed {
  %a = hbsm.alloc offset 61440 : !hbsm.buffer<hbsm[0], 32x33xf32>
}
// CHECK: 'hbsm.alloc': bytes [61440, 65664) (4224 bytes) fall outside HBSM of machine 'tiny' (size 65536)

// -----

tpb.program "tiny" placed {
  %a = hbsm.alloc offset 64 : !hbsm.buffer<hbsm[0], 128x64xf32, slots = 2>
}
// CHECK: 'hbsm.alloc': bytes [64, 65600) (65536 bytes) fall outside HBSM of machine 'tiny' (size 65536)

// -----

tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[2], 4xf32>
}
// CHECK: 'hbsm.alloc': TPB 2 does not exist on machine 'tiny' (2 TPBs)

// -----

%a = hbsm.alloc offset -8 : !hbsm.buffer<ddr, 4xf32>
// CHECK: 'hbsm.alloc': offset -8 must be >= 0

// -----

tpb.program "tiny" placed {
  %f = hbsm.fifo producer 0 consumers [] : !hbsm.buffer<hbsm[0], 4xf32, slots = 2>
}
// CHECK: 'hbsm.fifo' needs at least one consumer TPB

// -----

tpb.program "tiny" placed {
  %f = hbsm.fifo producer 0 consumers [1] : !hbsm.buffer<ddr, 4xf32, slots = 2>
}
// CHECK: 'hbsm.fifo' must live in an HBSM, not ddr

// -----

tpb.program "m100" placed {
  %f = hbsm.fifo producer 0 consumers [1] : !hbsm.buffer<hbsm[2], 4xf32, slots = 2>
}
// CHECK: 'hbsm.fifo' lives in TPB 2's HBSM, which is neither the producer (0) nor a consumer ([1])

// -----

tpb.program "tiny" placed {
  %f = hbsm.fifo producer 0 consumers [3] : !hbsm.buffer<hbsm[0], 4xf32, slots = 2>
}
// CHECK: 'hbsm.fifo': TPB 3 does not exist on machine 'tiny' (2 TPBs)

// -----

tpb.program "tiny" placed {
  %f = hbsm.fifo producer 0 consumers [1] offset 40000 : !hbsm.buffer<hbsm[1], 4096xf32, slots = 2>
}
// CHECK: 'hbsm.fifo': bytes [40000, 72768) (32768 bytes) fall outside HBSM of machine 'tiny'

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x8xf32>
%v = hbsm.view %a[4, 0] : !hbsm.buffer<hbsm[0], 8x8xf32> -> !hbsm.buffer<hbsm[0], 5x8xf32>
// CHECK: 'hbsm.view': dimension 0: [4, 9) exceeds the source size 8

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x8xf32>
%v = hbsm.view %a[0, 0] : !hbsm.buffer<hbsm[0], 8x8xf32> -> !hbsm.buffer<hbsm[0], 8x8xf16>
// CHECK: 'hbsm.view': the view must keep the space, TPB and element type of its source

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x8xf32>
%v = hbsm.view %a[0] : !hbsm.buffer<hbsm[0], 8x8xf32> -> !hbsm.buffer<hbsm[0], 8x8xf32>
// CHECK: 'hbsm.view': source rank 2, 1 offsets and view rank 2 must agree

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x8xf32, slots = 2>
%v = hbsm.view %a[0, 0] slot 2 : !hbsm.buffer<hbsm[0], 8x8xf32, slots = 2> -> !hbsm.buffer<hbsm[0], 8x8xf32>
// CHECK: 'hbsm.view': slot 2 does not exist (source has 2 slots)

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 8x8xf32, slots = 2>
%v = hbsm.view %a[0, 0] : !hbsm.buffer<hbsm[0], 8x8xf32, slots = 2> -> !hbsm.buffer<hbsm[0], 8x8xf32>
// CHECK: 'hbsm.view': without 'slot' the view keeps the source's 2 slots
