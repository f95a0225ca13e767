// RUN: m100-opt %s --split-input-file --parsing-diagnostics | filecheck %s
// Negative tests: every sync attribute verifier (reported while parsing).

"test.op"() {u = #sync.update<counter = 1, mask = 0>} : () -> ()
// CHECK: #sync.update: TPB mask 0 names no TPB

// -----

"test.op"() {u = #sync.update<counter = 1, mask = 1, amount = 0>} : () -> ()
// CHECK: #sync.update: amount 0 must be >= 1

// -----

"test.op"() {u = #sync.update<counter = 1, mask = 1, trigger = later>} : () -> ()
// CHECK: #sync.update: trigger must be 'end' or 'block', not 'later'

// -----

"test.op"() {m = #sync.monitor<tpb = 0, counter = -1, expected = 0>} : () -> ()
// CHECK: #sync.monitor: tpb, counter, expected and per_block must be >= 0

// -----

"test.op"() {m = #sync.monitor<tpb = 0, expected = 0>} : () -> ()
// CHECK: #sync.monitor: missing 'counter'

// -----

"test.op"() {a = #sync.actions<blocks = 0>} : () -> ()
// CHECK: #sync.actions: blocks must be >= 1, not 0
