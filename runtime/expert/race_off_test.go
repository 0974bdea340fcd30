//go:build !race

package expert_test

const raceEnabled = false
