//go:build race

package agent

// raceEnabled makes the runtime-heavy tests use tiny workloads: the race
// detector slows the runtime's kernels about 200×.
const raceEnabled = true
