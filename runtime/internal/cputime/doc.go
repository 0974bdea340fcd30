// Package cputime reads CPU clocks for the runtime's benchmarks: on a shared,
// noisy machine the CPU time a thread got measures model and kernel speed
// better than wall time.
package cputime
