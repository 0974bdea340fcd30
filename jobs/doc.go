// Package jobs defines benchmark job specs: the Go types, their YAML and
// JSON forms, validation with precise error locations, deterministic
// expansion of the config matrix, and the built-in suites.
//
// A Spec says what to run (a model artifact, prompts, prefill and decode
// lengths), under which runtime configurations (the matrix of modes, expert
// budgets and storage profiles), how (warm-up, repetitions, cooldown,
// timeout), where (a device selector) and with which retry policy and
// priority. The coordinator stores specs, the scheduler matches their
// selectors against devices, and the agent expands the matrix and runs each
// config with the LES runtime.
//
// Parsing is strict: unknown fields, wrong types and out-of-range values are
// reported as a list of Issues, each with a dotted path such as
// "matrix.modes[2]" and, for YAML and JSON text, the line and column:
//
//	smoke.yaml:12:7: matrix.modes[2]: unknown mode "lookahed" (want one of resident, on-demand, on-demand-parallel, lookahead, scheduled, mixed-precision, speculative)
//
// Expansion is deterministic: the same spec always yields the same configs in
// the same order with the same keys (modes outermost, then budgets, then
// profiles, each in the order written).
//
// This package imports only the standard library and yaml.v3, so the agent
// (which runs on phones) and the coordinator share it.
package jobs
