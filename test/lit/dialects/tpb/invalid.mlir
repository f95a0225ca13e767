// RUN: m100-opt %s --split-input-file --verify-diagnostics | filecheck %s
// Negative tests: every tpb op verifier, at the placed and the resolved level.

// --- tpb.matmul: shapes (placed), unknown slot, missing operand, epilogue types
tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 32x32xf32>
  %c = hbsm.alloc : !hbsm.buffer<hbsm[0], 32x64xf32>
  %e = tpb.matmul tpb 0 a(%a) b(%c) c(%c) {m = 32, n = 64, k = 16}
}
// CHECK: 'tpb.matmul' (tpb 0): tcu.matmul: operand 'a' walks 1024 elements but the logical shape [32, 16] has 512

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xf32>
%e = tpb.matmul tpb 0 a(%a) b(%a) c(%a) d(%a) {m = 4, n = 4, k = 4}
// CHECK: 'tpb.matmul' (tpb 0): unknown operand slot 'd' (expected: a, b, c, bias, per_channel, dequant, scale, acc, post_in)

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xf32>
%e = tpb.matmul tpb 0 a(%a) c(%a) {m = 4, n = 4, k = 4}
// CHECK: 'tpb.matmul' (tpb 0): operand 'b' has neither a buffer nor a walk

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xi8>
%c = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xi32>
%e = tpb.matmul tpb 0 a(%a) b(%a) c(%c) {m = 4, n = 4, k = 4, act = "gelu"}
// CHECK: 'tpb.matmul' (tpb 0): tcu.matmul: integer epilogues support none/relu/clamp, not gelu

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xf32>
%e = tpb.matmul tpb 0 a(%a) b(%a) c(%a) {m = 4, n = 4, k = 4, act = "swish"}
// CHECK: 'tpb.matmul' (tpb 0): unknown activation 'swish'

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[1], 4x4xf32>
%e = tpb.matmul tpb 0 a(%a) b(%a) c(%a) {m = 4, n = 4, k = 4}
// CHECK: 'tpb.matmul' (tpb 0): tcu.matmul: operand 'a' must be in the HBSM of TPB 0

// -----

// --- accesses against buffers (placed)
%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xf32>
%e = tpb.matmul tpb 0 a(%a, #twu.access<affine_map<(d0, d1) -> (d0 + 1, d1)>, [4, 4]>) b(%a) c(%a) {m = 4, n = 4, k = 4}
// CHECK: 'tpb.matmul' (tpb 0): operand 'a': index 0 ranges over [1, 4] but the buffer dimension has size 4 (buffer [4, 4])

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xf32>
%e = tpb.matmul tpb 0 a(%a, #twu.access<affine_map<(d0) -> (d0)>, [16]>) b(%a) c(%a) {m = 4, n = 4, k = 4}
// CHECK: 'tpb.matmul' (tpb 0): operand 'a': the map has 1 results but the buffer has rank 2

// -----

// --- tpb.conv2d
tpb.program "tiny" placed {
  %x = hbsm.alloc : !hbsm.buffer<hbsm[0], 1x8x8x4xf32>
  %w = hbsm.alloc : !hbsm.buffer<hbsm[0], 3x3x4x4xf32>
  %y = hbsm.alloc : !hbsm.buffer<hbsm[0], 1x8x8x4xf32>
  %t = tpb.conv2d tpb 0 x(%x) w(%w) y(%y) {n = 1, h = 8, width = 8, c = 4, f = 4, kh = 3, kw = 3}
}
// CHECK: 'tpb.conv2d' (tpb 0): tcu.conv2d: operand 'y' walks 256 elements but the logical shape [1, 6, 6, 4] has 144

// -----

%x = hbsm.alloc : !hbsm.buffer<hbsm[0], 1x8x8x4xf32>
%t = tpb.conv2d tpb 0 x(%x) w(%x) y(%x) {n = 1, h = 8, width = 8, c = 4, f = 4, kh = 3, kw = 3, stride = array<i64: 2>}
// CHECK: 'tpb.conv2d' (tpb 0): 'stride' needs 2 values

// -----

// --- tpb.cvu
%x = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xf32>
%t = tpb.cvu tpb 0 in0(%x) out(%x) {in_shapes = [array<i64: 4, 4>], out_shape = array<i64: 4, 4>, stages = [#tpb.stage<add(in0, s0)>]}
// CHECK: 'tpb.cvu' (tpb 0): cvu.pipeline: stage 0 reads stage 0, which is not an earlier stage

// -----

%x = hbsm.alloc : !hbsm.buffer<hbsm[0], 4x4xf32>
%t = tpb.cvu tpb 0 in0(%x) in1(%x) out(%x) {in_shapes = [array<i64: 4, 4>], out_shape = array<i64: 4, 4>, stages = [#tpb.stage<relu(in0)>]}
// CHECK: 'tpb.cvu' (tpb 0): unknown operand slot 'in1' (expected: in0, out)

// -----

// --- tpb.copy: resolved level needs walks and sync; walks stay inside their buffers
tpb.program "tiny" resolved {
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.copy tpb 0 src(%a) dst(%a) sync #sync.actions<blocks = 1>
}
// CHECK: 'tpb.copy' (tpb 0): operand 'src' has no walk; the resolved level needs a #twu.walk (run twu-materialize)

// -----

tpb.program "tiny" resolved {
  tpb.stream cluster 0 {
    %t = tpb.copy tpb 0 src(#twu.walk<hbsm[0], 0, f32, [(0, 1, 15)]>) dst(#twu.walk<hbsm[0], 64, f32, [(0, 1, 15)]>)
  }
}
// CHECK: 'tpb.copy' (tpb 0): no sync actions; the resolved level needs 'sync #sync.actions<...>' (run sync-insert)

// -----

tpb.program "tiny" placed {
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 16xf32>
  %b = hbsm.alloc offset 64 : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.copy tpb 0 src(%a, #twu.walk<hbsm[0], 4, f32, [(0, 1, 15)]>) dst(%b)
}
// CHECK: 'tpb.copy' (tpb 0): operand 'src': the walk touches bytes [4, 68) outside its buffer's [0, 64)

// -----

tpb.program "tiny" placed {
  %a = hbsm.alloc offset 0 : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.copy tpb 0 src(%a, #twu.walk<hbsm[0], 0, f16, [(0, 1, 15)]>) dst(%a)
}
// CHECK: 'tpb.copy' (tpb 0): operand 'src': the walk (hbsm, f16) does not match its buffer !hbsm.buffer<hbsm[0], 16xf32>

// -----

tpb.program "tiny" resolved {
  tpb.stream cluster 0 {
    %t = tpb.copy tpb 0 src(#twu.walk<hbsm[0], 0, f32, [(0, 0, 1), (0, 0, 1), (0, 0, 1), (0, 0, 1), (0, 0, 1), (0, 0, 1), (0, 1, 1)]>) dst(#twu.walk<hbsm[0], 64, f32, [(0, 1, 1)]>) sync #sync.actions<blocks = 1>
  }
}
// CHECK: 'tpb.copy' (tpb 0): dtdu.copy operand 'src': 7 TWU levels exceed the machine's budget of 6

// -----

tpb.program "tiny" resolved {
  tpb.stream cluster 0 {
    %t = tpb.copy tpb 0 src(#twu.walk<hbsm[0], 65532, f32, [(0, 1, 1)]>) dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 1)]>) sync #sync.actions<blocks = 1>
  }
}
// CHECK: 'tpb.copy' (tpb 0): dtdu.copy operand 'src': bytes [65532, 65540) fall outside HBSM (size 65536)

// -----

// --- tpb.fill
tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.fill tpb 2 dst(%a) {value = 1.0}
}
// CHECK: 'tpb.fill' (tpb 2): TPB 2 does not exist on machine 'tiny' (2 TPBs)

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 15xf32>
%t = tpb.fill tpb 0 dst(%a) sync #sync.actions<blocks = 4> {value = 1.0}
// CHECK: 'tpb.fill' (tpb 0): dtdu.fill: blocks (4) must divide the element count

// -----

// --- tpb.broadcast
tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.broadcast tpb 0 src(%a) dst(%a) {tpb_mask = 4}
}
// CHECK: 'tpb.broadcast' (tpb 0): dtdu.broadcast: TPB mask 0x4 names no TPB or a missing TPB

// -----

// --- tpb.csu
%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
%t = tpb.csu tpb 0 op0(%a) op1(%a) {routine = "sort"}
// CHECK: 'tpb.csu' (tpb 0): unknown CSU routine 'sort' (known: gather, scatter, topk, argmax, memcpy)

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
%b = hbsm.alloc : !hbsm.buffer<hbsm[0], 4xf32>
%t = tpb.csu tpb 0 op0(%a) op1(%b) {routine = "argmax", params = array<i64: 4, 4>}
// CHECK: 'tpb.csu' (tpb 0): csu.call argmax: argmax output must be i32

// -----

// --- tpb.dma
tpb.program "tiny" resolved {
  tpb.stream ccb {
    %t = tpb.dma engine 2 src(#twu.walk<ddr, 0, f32, [(0, 1, 3)]>) dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 1>
  }
}
// CHECK: 'tpb.dma' (engine 2): ccb.dma: DMA engine 2 does not exist (the CCB has 2)

// -----

%a = hbsm.alloc : !hbsm.buffer<ddr, 16xf32>
%b = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xi8>
%t = tpb.dma engine 0 src(%a) dst(%b)
// CHECK: 'tpb.dma' (engine 0): ccb.dma: DMA does not convert types (f32 -> i8)

// -----

// --- tpb.program
tpb.program "huge" placed {
}
// CHECK: 'tpb.program': unknown machine 'huge'

// -----

tpb.program "tiny" final {
}
// CHECK: 'tpb.program': level must be 'placed' or 'resolved', not 'final'

// -----

tpb.program "tiny" resolved {
  %a = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
}
// CHECK: 'tpb.program' (resolved): 'hbsm.alloc' of !hbsm.buffer<hbsm[0], 16xf32> has no offset (run hbsm-allocate)

// -----

tpb.program "tiny" resolved {
  %b = sync.barrier mask 3
}
// CHECK: 'tpb.program' (resolved): 'sync.barrier' is not lowered to counters (run sync-insert)

// -----

tpb.program "tiny" resolved attributes {metadata = ["key"]} {
}
// CHECK: 'tpb.program': metadata is a flat list of key, value strings

// -----

// --- tpb.stream
tpb.program "tiny" resolved {
  tpb.stream cluster 1 {
  }
}
// CHECK: 'tpb.stream': cluster 1 does not exist on machine 'tiny' (1 clusters; ccb = the DMA stream)

// -----

tpb.program "tiny" resolved {
  tpb.stream cluster 0 {
    %t = tpb.dma engine 0 src(#twu.walk<ddr, 0, f32, [(0, 1, 3)]>) dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 1>
  }
}
// CHECK: 'tpb.stream' cluster 0: a 'tpb.dma' belongs to the ccb stream

// -----

tpb.program "tiny" resolved {
  tpb.stream ccb {
    %t = tpb.fill tpb 0 dst(#twu.walk<hbsm[0], 0, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 1> {value = 0.0}
  }
}
// CHECK: 'tpb.stream' ccb: only 'tpb.dma' ops belong here, not 'tpb.fill'

// -----

tpb.program "m100" resolved {
  tpb.stream cluster 0 {
    %t = tpb.fill tpb 4 dst(#twu.walk<hbsm[4], 0, f32, [(0, 1, 3)]>) sync #sync.actions<blocks = 1> {value = 0.0}
  }
}
// CHECK: 'tpb.stream' cluster 0: 'tpb.fill' (tpb 4) is in cluster 1

// -----

tpb.stream cluster 0 {
}
// CHECK: 'tpb.stream' expects parent op 'tpb.program'

// -----

// --- tpb.segment
tpb.program "tiny" resolved {
  tpb.segment "w" hbsm 0 data "00"
}
// CHECK: 'tpb.segment' "w": segments live in ddr or sram, not 'hbsm'

// -----

tpb.program "tiny" resolved {
  tpb.segment "w" sram 1048575 data "0000"
}
// CHECK: 'tpb.segment' "w": bytes [1048575, 1048577) fall outside SRAM (size 1048576)

// -----

tpb.program "tiny" resolved {
  tpb.segment "w" ddr 0 data "0g"
}
// CHECK: 'tpb.segment' "w": data is not a hex string

// -----

// --- tpb.symbol
tpb.program "tiny" resolved {
  tpb.symbol "x" scratch 4xf32 at ddr 0
}
// CHECK: 'tpb.symbol' "x": role must be 'input', 'output' or 'weight', not 'scratch'

// -----

tpb.program "tiny" resolved {
  tpb.symbol "x" input 4x4097xf32 at hbsm[1] 0
}
// CHECK: 'tpb.symbol' "x": bytes [0, 65552) fall outside HBSM (size 65536)

// -----

tpb.program "tiny" resolved {
  tpb.symbol "x" input 4xf32 at hbsm[3] 0
}
// CHECK: 'tpb.symbol' "x": TPB 3 does not exist on machine 'tiny' (2 TPBs)

// -----

// --- slot-indexed access (one map result more than the buffer's rank selects the slot)
%a = hbsm.alloc : !hbsm.buffer<ddr, 16xf32>
%b = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32, slots = 2>
%t = tpb.dma engine 0 src(%a) dst(%b, #twu.access<affine_map<(d0) -> (2, d0)>, [16]>)
// CHECK: 'tpb.dma' (engine 0): operand 'dst': index 0 ranges over [2, 2] but the buffer dimension has size 2 (buffer [2, 16])

// -----

tpb.program "tiny" placed {
  %a = hbsm.alloc : !hbsm.buffer<ddr, 16xf32>
  %b = hbsm.alloc : !hbsm.buffer<hbsm[0], 16xf32>
  %t = tpb.dma engine 3 src(%a) dst(%b)
}
// CHECK: 'tpb.dma' (engine 3): DMA engine 3 does not exist (the CCB has 2)
