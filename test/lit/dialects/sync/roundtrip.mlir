// RUN: m100-opt %s | filecheck %s
// RUN: m100-opt %s | m100-opt | filecheck %s
// RUN: m100-opt %s --print-op-generic | m100-opt | filecheck %s
// Every sync op and attribute prints back exactly as written.

func.func @tokens(%t0: !sync.token, %t1: !sync.token) -> !sync.token {
  %j = sync.join %t0, %t1
  %one = sync.join %j
  %b = sync.barrier %j, %one mask 3
  %free = sync.barrier mask 1 {note = "start"}
  "test.op"() {a = #sync.actions<blocks = 1>, m = #sync.monitor<tpb = 0, counter = 3, expected = 5>, mp = #sync.monitor<tpb = 1, counter = 15, expected = 0, per_block = 4>, u = #sync.update<counter = 2, mask = 3>, ub = #sync.update<counter = 2, mask = 1, amount = 7, trigger = block>, full = #sync.actions<blocks = 4, monitors = [#sync.monitor<tpb = 0, counter = 3, expected = 5, per_block = 1>], updates = [#sync.update<counter = 3, mask = 2, amount = 2, trigger = block>, #sync.update<counter = 1, mask = 1>]>} : () -> ()
  func.return %b : !sync.token
}

// CHECK: builtin.module {
// CHECK-NEXT:   func.func @tokens(%t0: !sync.token, %t1: !sync.token) -> !sync.token {
// CHECK-NEXT:     %j = sync.join %t0, %t1
// CHECK-NEXT:     %one = sync.join %j
// CHECK-NEXT:     %b = sync.barrier %j, %one mask 3
// CHECK-NEXT:     %free = sync.barrier mask 1 {note = "start"}
// CHECK-NEXT:     "test.op"() {a = #sync.actions<blocks = 1>, m = #sync.monitor<tpb = 0, counter = 3, expected = 5>, mp = #sync.monitor<tpb = 1, counter = 15, expected = 0, per_block = 4>, u = #sync.update<counter = 2, mask = 3>, ub = #sync.update<counter = 2, mask = 1, amount = 7, trigger = block>, full = #sync.actions<blocks = 4, monitors = [#sync.monitor<tpb = 0, counter = 3, expected = 5, per_block = 1>], updates = [#sync.update<counter = 3, mask = 2, amount = 2, trigger = block>, #sync.update<counter = 1, mask = 1>]>} : () -> ()
// CHECK-NEXT:     func.return %b : !sync.token
// CHECK-NEXT:   }
// CHECK-NEXT: }
