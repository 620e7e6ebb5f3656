# SPDX-License-Identifier: Apache-2.0
# Which tests are slow (label `slow`: left out of `make test-fast`) and which must run alone
# (RUN_SERIAL: they measure time, memory or throughput, or load both cores themselves, so a
# neighbour would make them flaky or slow). Names are test file names without extension.
# Everything else runs in parallel under `ctest -j` (every test picks free loopback ports).
set(SLUICE_SLOW_TESTS
  test_evict_flood            # unit: 10 M attacker keys, ~50 s
)
set(SLUICE_SERIAL_TESTS
)
