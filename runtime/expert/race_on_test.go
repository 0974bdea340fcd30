//go:build race

package expert_test

// raceEnabled trims the model-level tests under -race (about 10× slower);
// the store, prefetch and scheduler tests run in full.
const raceEnabled = true
