// RUN: m100-opt %s --split-input-file --parsing-diagnostics | filecheck %s
// Negative tests: the #tpb.stage attribute and tpb op syntax errors (reported while parsing).

"test.op"() {s = #tpb.stage<blend(in0)>} : () -> ()
// CHECK: #tpb.stage: unknown CVU op 'blend'

// -----

"test.op"() {s = #tpb.stage<add(in0, x1)>} : () -> ()
// CHECK: stage argument 'x1' is not inN, sN or a number

// -----

"test.op"() {s = #tpb.stage<add(in0, in1), scale = 2>} : () -> ()
// CHECK: unknown stage key 'scale' (axis, fparam, iparams)

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4xf32>
%t = tpb.copy tpb 0 src(%a) src(%a) dst(%a)
// CHECK: operand slot 'src' given twice

// -----

%a = hbsm.alloc : !hbsm.buffer<hbsm[0], 4xf32>
%t = tpb.copy tpb 0 src(%a) dst(%a) sync #sync.update<counter = 1, mask = 1>
// CHECK: 'sync' expects a #sync.actions<...> attribute
