// Package protocol defines the NATS protocol between the coordinator and
// its agents: subjects, streams and versioned JSON message types, with
// size-limited, validating decoders shared by both sides.
//
// Subjects (version 1):
//
//	lesfarm.v1.device.<id>.hello      agent → coordinator  request-reply  Hello → HelloReply
//	lesfarm.v1.device.<id>.heartbeat  agent → coordinator  request-reply  Heartbeat → HeartbeatReply
//	lesfarm.v1.device.<id>.assign     coordinator → agent  request-reply  SignedAssignment → AssignReply
//	lesfarm.v1.device.<id>.cancel     coordinator → agent  request-reply  Cancel → CancelReply
//	lesfarm.v1.telemetry.<run>        agent → JetStream TELEMETRY         TelemetryBatch
//	lesfarm.v1.result.<run>           agent → JetStream RESULTS           Result
//
// Every message carries "v", the protocol version. A decoder rejects a
// message that is too large, is not JSON of the expected shape, has an
// unsupported version or fails validation, with a *DecodeError whose Kind
// says which; RejectCounter counts them for metrics. A decoder never panics.
//
// Leases and fencing: an Assignment carries the run's fencing token. Every
// later message about the run (heartbeat run status, telemetry, result)
// carries the token back, and the coordinator drops messages whose token is
// not the current lease's (a lost agent's late reports).
//
// Assignments are signed with the coordinator's ed25519 key (HelloReply
// announces the public key); agents refuse unsigned or badly signed ones.
//
// Telemetry idempotency: a TelemetryBatch has a per-run sequence number Seq
// starting at 0, and each sample an index within the batch; the coordinator
// stores (run, seq, idx) once, so redelivered batches are harmless.
package protocol
