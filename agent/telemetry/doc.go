// Package telemetry turns the LES runtime's trace events into telemetry
// batches and delivers them to JetStream without ever blocking the runtime
// and without losing them when NATS is unreachable.
//
//	runtime ──trace.Sink──► Aggregator ──batches──► Outbox ──► JetStream
//	                                                  │  ▲
//	                                                  ▼  │ (drained in order
//	                                               Buffer   after reconnect)
//	                                              (on disk, bounded)
//
// The Aggregator collects per-token timings and per-layer expert outcomes
// under a mutex and cuts a batch every FlushEvery or MaxEvents, whichever
// comes first, numbering batches of a run 0, 1, 2, … The Outbox publishes
// records from a single goroutine; while the connection is down, or when a
// publish is not acknowledged, records go to the on-disk Buffer, which
// drops the oldest detail (telemetry batches) first when full, with a
// counter, and never drops summaries (results).
package telemetry
