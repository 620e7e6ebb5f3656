# SPDX-License-Identifier: Apache-2.0
# How the tests share the machine under `ctest -j` (make test, make test-fast). Names are test
# file names without extension. Every test picks free loopback ports, so by default tests
# run side by side. Times below: one `ctest -L integration -j2` on the 2 shared cores at load
# ~13 (other builds running), 2026-12-04; the whole pass took 805 s, its tests 1595 s.
#
# slow: left out of `make test-fast` (still in `make test`).
set(SLUICE_SLOW_TESTS
  test_evict_flood            # unit: 10 M attacker keys, 52 s
  test_packaging              # dpkg-buildpackage of the tree, 404 s
  test_replay_large           # a 1 GB log through sluice replay, 426 s
  test_tenants                # 92 s
  test_capacity               # 73 s
)
# heavy: they keep a core busy for minutes; one at a time (RESOURCE_LOCK cpu_heavy), each
# beside the light tests.
set(SLUICE_HEAVY_TESTS
  test_packaging
  test_replay_large
)
# serial: they measure time, memory or a timeout on the real clock, so a neighbour makes
# them fail (RUN_SERIAL: nothing else runs meanwhile). Seen failing beside others and
# passing alone: test_console (a rejection ratio of background traffic), test_store_path (a
# 50 ms store timeout). The others measure the same kinds of things.
set(SLUICE_SERIAL_TESTS
  test_console
  test_store_path
  test_client_paced           # pacing on the real clock
  test_conn_budget            # resident memory of 300 stalled connections
  test_ext_proc               # resident memory of 2,000 concurrent ext_proc streams, a 100 MB body
  test_footprint              # resident memory of the installed config
  test_redis_failover         # failover within deadlines, under load
  test_redis_leasing          # adversarial timing of leases
  test_slow_clients           # read timeouts of slowloris connections
  test_redis_cluster_retry    # unit: failed twice beside others under -j2 (plain and ASan, load
                              # 13-23), passed alone both times: TRYAGAIN retries within deadlines
)
