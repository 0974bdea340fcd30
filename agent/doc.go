// Package agent is the on-device program of the farm: it registers the
// device with the coordinator over NATS, heartbeats at the TTL the
// coordinator chooses, accepts signed assignments, downloads and verifies
// the model, runs the job's configs with the embedded LES runtime, streams
// telemetry to JetStream (buffering on disk while NATS is unreachable) and
// reports results carrying the lease's fencing token.
//
// The same Agent runs as a host process (lesfarm agent) and inside a phone
// app (agent/mobile).
//
// # States
//
// Status().State moves through these states (OnState sees each change):
//
//	                 hello accepted
//	  connecting ─────────────────────► idle ◄─────────► running
//	      ▲                              ▲  assignment      │
//	      │ run ends while               │  accepted / run  │
//	      │ unregistered                 │  ends            │
//	      └──────────────────────────────┼──────────────────┤
//	                                     │ hello accepted   │ no contact
//	                                   cut_off ◄────────────┘ past the TTL
//	                                             (from idle too)
//
//	any state ── ctx done ──► stopping ──► stopped
//
// connecting: no hello answered yet (at start, or a run ended while the
// registration was lost). The agent retries the hello with the reconnect
// backoff (at least 10 s after a refusal). A reconnect, or a heartbeat
// reply asking for a new hello, sends a hello without changing the state.
//
// idle: registered; heartbeats go out every HeartbeatIntervalMS of the
// hello reply (a third of the TTL when unset) and carry no run, or only
// finished runs whose result the coordinator has not committed yet
// (unreported.go).
//
// running: one run at a time. Its heartbeats renew the lease. A cancel
// (the coordinator's cancel subject) stops it and reports it as cancelled.
// A cancel notice in a hello or heartbeat reply means the lease is gone:
// the run stops and is not reported.
//
// cut_off: the coordinator has not been reached for longer than the TTL.
// The lease is gone (the coordinator requeues the run), so the run is
// abandoned without a report and the agent says hello again when it can.
//
// stopping: Run's ctx is done. The agent refuses new work, aborts the
// current run and reports it as aborted (the coordinator requeues it
// elsewhere), flushes telemetry within ShutdownTimeout (what is left stays
// in the disk buffer for the next start) and drains the connection.
//
// If nats.go gives up on the connection (a refused credential), Run
// returns the error instead (ErrCredentialRefused; see connclosed.go).
//
// # Files
//
//   - agent.go: Config, New, Status and Run (start and graceful shutdown).
//   - connection.go: the NATS options (auth, TLS, reconnect backoff) and
//     connection handlers; connclosed.go: the connection given up for good.
//   - session.go: hello, heartbeat and the loop that schedules them.
//   - watchdog.go: the TTL watchdog that cuts a run off.
//   - assign.go: the assign and cancel handlers (signature, admission).
//   - validate.go: the pure checks of an assignment against the device.
//   - execute.go: one run: download, runner, telemetry, the result.
//   - runner.go: the configs of a job run with the LES runtime.
//   - clock.go and unreported.go: device clock skew and finished runs
//     still awaiting the coordinator's commit.
package agent
