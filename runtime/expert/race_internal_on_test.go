//go:build race

package expert

// raceBuild: the test binary runs under -race (about 10x slower).
const raceBuild = true
