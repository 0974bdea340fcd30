// Package expert is the LES expert store, the moe.Source that serves a
// Mixture-of-Experts model's expert weights from a byte-budgeted cache and
// reads the rest from the model file as its mode schedules, on real
// storage, an emulated device or a device's own clock.
//
// A Store composes parts cut by responsibility, each in its own files:
//
//   - The cache (cache.go): the expert entries (resident, queued or being
//     read), the byte budget they live in (budget.go) and the cache policy
//     that picks victims (policy.go: lfu, lru, lrfu; policy_arc.go,
//     policy_nextuse.go, policy_layered.go; the oracle's Belady in
//     oracle.go). The naive mode caches pages of the file instead, as the
//     kernel does for a mapping (pageCache, pagecache.go).
//   - The reader (reader.go): the storage, one strategy per kind of
//     device behind one interface — the file at its real speed, buffered
//     or direct with O_DIRECT (fileReader), a profile's emulated flash
//     paced by a Throttle (flashReader, throttle.go), or the naive mode's
//     page faults with the kernel's read-ahead (faultReader, naive.go,
//     naive_readahead.go).
//   - The read queue (readqueue.go): demanded and speculative reads in two
//     classes and the pool of workers that call the reader; demand always
//     goes first.
//   - The mode's strategy (strategy.go, mode.go): whether it prefetches,
//     how it issues missing reads and in which order it computes experts —
//     on-demand, on-demand-parallel, lookahead, scheduled, the oracle
//     (oracle*.go) and naive. The experts used and their weights never
//     depend on the mode (TestModesMatchResident).
//   - The device clock (deviceclock.go, deviceflash.go), under device
//     time: it prices compute and reads as the profile's device would, so
//     decode figures do not depend on the host (Store.Clock).
//   - The statistics (Meter, meter.go, stats.go, iostats.go): hits,
//     misses, prefetch use, stall, bytes read and the pread histogram
//     (Store.Meter), and the trace events the model emits (sink.go).
//
// Storage profiles (profile.go, servicetime.go) describe a device's flash
// and compute; routing traces (tracefile.go) record a run's routing for
// the oracle and for replay (replay.go).
package expert
