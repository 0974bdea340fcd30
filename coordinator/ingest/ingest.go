// Package ingest moves telemetry and results from JetStream into Postgres.
//
// Two durable pull consumers read the TELEMETRY and RESULTS streams in
// batches. Several telemetry workers each fetch a batch of messages
// (topped up by further fetches while the stream holds a backlog), decode
// them as they arrive, and write the batch in one transaction (one
// COPY straight into samples; on a unique violation, COPY into a staging
// table, then INSERT ... ON CONFLICT DO NOTHING on (run, seq, idx)), and
// the messages are acknowledged only after the commit:
// a crash between fetch and commit leaves them unacknowledged, JetStream
// redelivers them after AckWait, and duplicates are harmless. Results are
// applied as they arrive, without waiting to fill a batch: a free result
// worker takes what the stream holds (up to ResultBatch) and commits it in
// one transaction (store.CompleteRuns), each result's fencing token
// checked on its own.
//
// Memory is bounded by the consumers' MaxAckPending and the fetch size, not
// by the backlog: JetStream keeps the backlog on disk.
//
// Malformed, oversized or stale (wrong fencing token) messages are counted
// and terminated (never redelivered); they never stop the consumer.
package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lesfarm/lesfarm/coordinator/startstop"
	"github.com/lesfarm/lesfarm/coordinator/store"
	"github.com/lesfarm/lesfarm/protocol"
)

// Durable consumer names.
const (
	TelemetryConsumer = "lesfarm-ingest-telemetry"
	ResultsConsumer   = "lesfarm-ingest-results"
)

// Config configures an Ingester. JS and Store are required.
type Config struct {
	JS    jetstream.JetStream
	Store *store.Store
	// Workers is the number of concurrent telemetry fetch-and-commit loops
	// (default 4): while one decodes its batch, the others' COPYs keep
	// Postgres busy.
	Workers int
	// FetchMessages is the most telemetry messages written per transaction
	// (default 128: 6,400 samples of the agent's 500 ms batches at 100
	// tokens/s).
	FetchMessages int
	// CommitMessages is the most telemetry messages written per
	// transaction while the stream holds a backlog (default 4 ×
	// FetchMessages): after a fetch, as long as its last message says more
	// are pending, the worker fetches again without waiting and adds them
	// to the same transaction. Under load a fetch returns far fewer than
	// FetchMessages (25 per COPY at 1,000 agents) and every transaction's
	// fixed round trips and WAL flush were paid for each of them.
	CommitMessages int
	// FetchWait bounds how long a telemetry fetch waits to fill up
	// (default 50ms): the added ingest lag under light load, traded for
	// fewer, larger transactions. Results never wait to fill a batch
	// (see fetchNow).
	FetchWait time.Duration
	// ResultWorkers is how many results are applied concurrently (default
	// 8). Results are handed to the workers as they arrive, without
	// waiting for a batch to finish: the scheduler waits for each one to
	// free its device. More workers take more of a loaded database from
	// the telemetry workers: at 1,000 agents on 2 shared cores, 32 cut the
	// results' wait in the stream from 7.5 to 0.6 s but the samples
	// committed from 6.6k to 1.9k per second (docs/scale.md).
	ResultWorkers int
	// ResultBatch is the most results a worker commits in one transaction
	// (default 64; store.CompleteRuns). A worker takes what the stream
	// holds when it is free, so a lone result is committed alone at once
	// and a backlog in batches: one transaction of a few statements for
	// many results instead of one per result.
	ResultBatch int
	// AckWait is how long JetStream waits for an ack before redelivering
	// (default 30s).
	AckWait time.Duration
	// Replicas is the number of copies of each stream (default 1; 3 on a
	// NATS cluster). The consumers inherit it.
	Replicas int
	// MaxAckPending bounds unacknowledged telemetry messages in flight
	// (default 2 × Workers × CommitMessages): the backpressure.
	MaxAckPending int
	// Reporter commits the results and is told of each one committed
	// (nil: BaseReporter with Store, which commits and reports nothing).
	Reporter Reporter
	// HookWorkers is how many Reporter.Finished calls run at once
	// (default 4). They run apart from the result workers, so a slow one
	// (regression detection) delays acknowledgements, never the next
	// commits.
	HookWorkers int
	// BeforeCommit, when set, is called before each telemetry transaction;
	// an error abandons the batch without commit or ack and stops that
	// worker, like a crash. Tests use it.
	BeforeCommit func() error
	// Rejects counts rejected messages; nil means a private counter.
	Rejects *protocol.RejectCounter
	// QuarantineAfter and QuarantineWindow: a device is drained once this
	// many of its messages were rejected within the window (defaults 20
	// and 10 minutes; store.RecordRejections, validate.go).
	QuarantineAfter  int
	QuarantineWindow time.Duration
	// TelemetryWait is how long a succeeded result whose telemetry is not
	// all stored is held back (redelivered) waiting for it, from when it
	// reached its stream; past it the attempt fails as infrastructure
	// (default 2 minutes; completeness.go).
	TelemetryWait time.Duration

	Logger *slog.Logger
}

// Stats are cumulative counters of an Ingester.
type Stats struct {
	// Telemetry workers' time, summed over the workers, by phase: waiting
	// for a fetch to fill (Fetch), decoding and checking messages
	// (Decode), the transaction (Commit) and acknowledging (Ack). Their
	// shares say what bounds ingest.
	FetchTime, DecodeTime, CommitTime, AckTime time.Duration

	TelemetryMessages uint64 // committed telemetry messages
	Samples           uint64 // samples in committed messages
	SamplesInserted   uint64 // new rows (duplicates excluded)
	Stale             uint64 // messages rejected for a stale token
	Results           uint64 // committed results
	ResultBatches     uint64 // result transactions (each commits one or more results)
	Rejected          uint64 // malformed/oversized/invalid messages
	Errors            uint64 // database errors (batch retried)

	// RejectionsRecorded counts rejections charged to their devices in
	// the store; Quarantined the devices drained for them (validate.go).
	RejectionsRecorded uint64
	Quarantined        uint64
	// HeldResults counts deliveries of results held back waiting for
	// their telemetry (completeness.go).
	HeldResults uint64
}

// Ingester runs the consumers. Start it once; Stop drains it.
type Ingester struct {
	cfg     Config
	log     *slog.Logger
	rejects *protocol.RejectCounter
	ss      startstop.Service
	errMu   sync.Mutex
	errs    []error

	telMsgs, samples, inserted, stale, results, rejected, dbErrors atomic.Uint64
	resultBatches                                                  atomic.Uint64
	rejRecorded, quarantined, held                                 atomic.Uint64
	fetchNS, decodeNS, commitNS, ackNS                             atomic.Int64

	// validate.go: runs' bounds, and rejections waiting to be charged.
	bounds     boundsCache
	rejMu      sync.Mutex
	rejPending []store.Rejection
	rejWake    chan struct{}
}

// New validates cfg and returns an Ingester.
func New(cfg Config) (*Ingester, error) {
	if cfg.JS == nil || cfg.Store == nil {
		return nil, errors.New("ingest config: JS and Store are required")
	}
	cfg.Workers = cmp.Or(cfg.Workers, 4)
	cfg.FetchMessages = cmp.Or(cfg.FetchMessages, 128)
	cfg.CommitMessages = cmp.Or(cfg.CommitMessages, 4*cfg.FetchMessages)
	cfg.FetchWait = cmp.Or(cfg.FetchWait, 50*time.Millisecond)
	cfg.ResultWorkers = cmp.Or(cfg.ResultWorkers, 8)
	cfg.ResultBatch = cmp.Or(cfg.ResultBatch, 64)
	cfg.HookWorkers = cmp.Or(cfg.HookWorkers, 4)
	cfg.AckWait = cmp.Or(cfg.AckWait, 30*time.Second)
	cfg.TelemetryWait = cmp.Or(cfg.TelemetryWait, 2*time.Minute)
	cfg.MaxAckPending = cmp.Or(cfg.MaxAckPending, 2*cfg.Workers*cfg.CommitMessages)
	if cfg.Workers < 1 || cfg.FetchMessages < 1 || cfg.CommitMessages < cfg.FetchMessages || cfg.MaxAckPending < cfg.CommitMessages ||
		cfg.ResultWorkers < 1 || cfg.ResultBatch < 1 || cfg.HookWorkers < 1 {
		return nil, errors.New("ingest config: Workers, FetchMessages, ResultWorkers, ResultBatch, HookWorkers must be positive and FetchMessages <= CommitMessages <= MaxAckPending")
	}
	if cfg.Reporter == nil {
		cfg.Reporter = BaseReporter{Store: cfg.Store}
	}
	r := cfg.Rejects
	if r == nil {
		r = &protocol.RejectCounter{}
	}
	return &Ingester{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), rejects: r, rejWake: make(chan struct{}, 1)}, nil
}

// EnsureStreams creates or updates the TELEMETRY and RESULTS streams: file
// storage, work-queue retention (a message is deleted once acked), 1 MiB
// max message size, one replica.
func EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	return EnsureStreamsReplicated(ctx, js, 1)
}

// EnsureStreamsReplicated is EnsureStreams with replicas copies of each
// stream (3 on a NATS cluster: a stream then survives the loss of any one
// node, its leader included).
func EnsureStreamsReplicated(ctx context.Context, js jetstream.JetStream, replicas int) error {
	for _, sc := range []jetstream.StreamConfig{
		{Name: protocol.StreamTelemetry, Subjects: []string{protocol.TelemetrySubjectPattern}},
		{Name: protocol.StreamResults, Subjects: []string{protocol.ResultSubjectPattern}},
	} {
		sc.Storage = jetstream.FileStorage
		sc.Retention = jetstream.WorkQueuePolicy
		sc.MaxMsgSize = 1 << 20
		sc.Discard = jetstream.DiscardNew
		sc.Replicas = max(replicas, 1)
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("ingest: stream %s: %w", sc.Name, err)
		}
	}
	return nil
}

// Start creates the streams and durable consumers (their errors are
// returned) and starts the loops, which run until Stop (or ctx is
// cancelled); coordinator/startstop gives the semantics.
func (i *Ingester) Start(ctx context.Context) error {
	var tel, res jetstream.Consumer
	setup := func(ctx context.Context) error {
		if err := EnsureStreamsReplicated(ctx, i.cfg.JS, i.cfg.Replicas); err != nil {
			return err
		}
		var err error
		tel, err = i.cfg.JS.CreateOrUpdateConsumer(ctx, protocol.StreamTelemetry, jetstream.ConsumerConfig{
			Durable: TelemetryConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: i.cfg.AckWait,
			MaxAckPending: i.cfg.MaxAckPending, MaxRequestBatch: i.cfg.FetchMessages,
		})
		if err != nil {
			return fmt.Errorf("ingest: telemetry consumer: %w", err)
		}
		res, err = i.cfg.JS.CreateOrUpdateConsumer(ctx, protocol.StreamResults, jetstream.ConsumerConfig{
			Durable: ResultsConsumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: i.cfg.AckWait, MaxAckPending: resultMaxAckPending,
		})
		if err != nil {
			return fmt.Errorf("ingest: results consumer: %w", err)
		}
		return nil
	}
	return i.ss.StartFunc(ctx, setup, func(ctx context.Context) {
		// Rejections are charged until the loops, which note them, are done.
		rctx, stopRej := context.WithCancel(context.WithoutCancel(ctx))
		var rwg sync.WaitGroup
		rwg.Go(func() { i.rejectionLoop(rctx) })
		defer func() { stopRej(); rwg.Wait() }()
		var wg sync.WaitGroup
		for w := range i.cfg.Workers {
			wg.Go(func() { i.telemetryLoop(ctx, tel, fmt.Sprintf("telemetry-%d", w)) })
		}
		wg.Go(func() { i.resultLoop(ctx, res) })
		wg.Wait()
	})
}

// Started is closed once the loops run.
func (i *Ingester) Started() <-chan struct{} { return i.ss.Started() }

// Stop stops fetching, lets the batches in flight commit and ack, and waits
// for the loops; it is idempotent. It returns the errors that stopped
// loops early.
func (i *Ingester) Stop() error {
	i.ss.Stop()
	i.errMu.Lock()
	defer i.errMu.Unlock()
	return errors.Join(i.errs...)
}

// Stats returns the counters.
func (i *Ingester) Stats() Stats {
	return Stats{TelemetryMessages: i.telMsgs.Load(), Samples: i.samples.Load(), SamplesInserted: i.inserted.Load(),
		Stale: i.stale.Load(), Results: i.results.Load(), ResultBatches: i.resultBatches.Load(), Rejected: i.rejected.Load(), Errors: i.dbErrors.Load(),
		RejectionsRecorded: i.rejRecorded.Load(), Quarantined: i.quarantined.Load(), HeldResults: i.held.Load(),
		FetchTime: time.Duration(i.fetchNS.Load()), DecodeTime: time.Duration(i.decodeNS.Load()),
		CommitTime: time.Duration(i.commitNS.Load()), AckTime: time.Duration(i.ackNS.Load())}
}

// Rejects returns the reject counter.
func (i *Ingester) Rejects() *protocol.RejectCounter { return i.rejects }

// errCrash stops a worker without acking (BeforeCommit said so).
var errCrash = errors.New("ingest: batch abandoned before commit")

// telemetryLoop fetches batches, decodes each message as it arrives and
// commits the batch, until ctx ends. A batch already fetched is always
// committed with a context that is not cancelled, so Stop drains instead
// of abandoning work.
func (i *Ingester) telemetryLoop(ctx context.Context, c jetstream.Consumer, name string) {
	backoff := 100 * time.Millisecond
	b := &telBatch{}
	for ctx.Err() == nil {
		t0 := time.Now()
		mb, err := c.Fetch(i.cfg.FetchMessages, jetstream.FetchMaxWait(i.cfg.FetchWait))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			i.log.WarnContext(ctx, "ingest: fetch failed", "consumer", name, "err", err)
			sleep(ctx, backoff)
			continue
		}
		b.reset()
		decode := i.decodeAll(ctx, mb, b)
		// A backlog: top the transaction up with what the stream holds
		// now, without waiting for more.
		for b.fetched < i.cfg.CommitMessages && b.pending > 0 && ctx.Err() == nil {
			mb, err := c.FetchNoWait(min(i.cfg.FetchMessages, i.cfg.CommitMessages-b.fetched))
			if err != nil {
				break // commit what is in hand; the next fetch reports
			}
			before := b.fetched
			decode += i.decodeAll(ctx, mb, b)
			if b.fetched == before {
				break
			}
		}
		i.decodeNS.Add(int64(decode))
		i.fetchNS.Add(int64(time.Since(t0) - decode))
		if len(b.msgs) == 0 {
			continue
		}
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.cfg.AckWait)
		err = i.commitTelemetry(hctx, b)
		cancel()
		if errors.Is(err, errCrash) {
			i.errMu.Lock()
			i.errs = append(i.errs, fmt.Errorf("%s: %w", name, err))
			i.errMu.Unlock()
			return
		}
		if err != nil {
			i.dbErrors.Add(1)
			i.log.ErrorContext(ctx, "ingest: batch failed, will be redelivered", "consumer", name, "messages", len(b.msgs), "err", err)
			for _, m := range b.msgs {
				_ = m.NakWithDelay(backoff)
			}
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// checkSubject returns an invalid-message error when a message's run id is
// not its subject's, or when the subject names a device
// (lesfarm.v1.telemetry.<device>.<run>) other than the body's device_id. The
// subject is what NATS permissions bind to a device's credential, so this
// check stops a device from writing under another device's name even if
// the permissions were too wide.
func checkSubject(typ, subject string, runID int64, deviceID string) error {
	dev, id, err := protocol.ParseDataSubject(subject)
	switch {
	case err != nil || id != runID:
		return &protocol.DecodeError{Type: typ, Kind: protocol.RejectInvalid, Err: fmt.Errorf("run_id %d does not match subject %s", runID, subject)}
	case dev != "" && dev != deviceID:
		return &protocol.DecodeError{Type: typ, Kind: protocol.RejectInvalid, Err: fmt.Errorf("device_id %q does not match subject %s", deviceID, subject)}
	}
	return nil
}

// reject counts and terminates a message that can never be processed.
func (i *Ingester) reject(ctx context.Context, m jetstream.Msg, err error, what string) {
	i.rejected.Add(1)
	i.rejects.Observe(err)
	i.noteReject(m.Subject(), what+": "+err.Error()) // charged to the publishing device (validate.go)
	i.log.WarnContext(ctx, "ingest: message rejected", "subject", m.Subject(), "kind", protocol.RejectKind(err), "what", what, "err", err)
	_ = m.TermWithReason(what)
}

// telBatch is one transaction's decoded telemetry, reused by its worker.
type telBatch struct {
	batches []*protocol.TelemetryBatch
	msgs    []jetstream.Msg // msgs[k] carried batches[k]
	// fetched counts the messages fetched (rejected ones included);
	// pending is what the stream held for the consumer beyond the last
	// one (its metadata's NumPending).
	fetched int
	pending uint64
}

func (b *telBatch) reset() {
	clear(b.batches)
	clear(b.msgs)
	b.batches, b.msgs = b.batches[:0], b.msgs[:0]
	b.fetched, b.pending = 0, 0
}

// decodeAll decodes mb's messages into b as they arrive and returns the
// time spent decoding.
func (i *Ingester) decodeAll(ctx context.Context, mb jetstream.MessageBatch, b *telBatch) time.Duration {
	var decode time.Duration
	for m := range mb.Messages() {
		d0 := time.Now()
		b.fetched++
		b.pending = 0
		if md, err := m.Metadata(); err == nil {
			b.pending = md.NumPending
		}
		i.decodeTelemetry(ctx, m, b)
		decode += time.Since(d0)
	}
	return decode
}

// decodeTelemetry decodes and checks m and adds it to b; a message that
// can never be stored is rejected (terminated) instead.
func (i *Ingester) decodeTelemetry(ctx context.Context, m jetstream.Msg, b *telBatch) {
	tb, err := protocol.DecodeTelemetry(m.Data())
	if err == nil {
		err = checkSubject("telemetry", m.Subject(), tb.RunID, tb.DeviceID)
	}
	if err == nil {
		err = checkMsgID("telemetry", m, tb.DeviceID, tb.RunID, tb.Token, tb.Seq)
	}
	if err != nil {
		i.reject(ctx, m, err, "malformed telemetry")
		return
	}
	b.batches = append(b.batches, tb)
	b.msgs = append(b.msgs, m)
}

// commitTelemetry writes b in one transaction, then acknowledges its
// messages (stale ones are terminated).
func (i *Ingester) commitTelemetry(ctx context.Context, b *telBatch) error {
	if i.cfg.BeforeCommit != nil {
		if err := i.cfg.BeforeCommit(); err != nil {
			return errCrash
		}
	}
	t0 := time.Now()
	if err := i.checkTelemetry(ctx, b); err != nil { // validate.go
		return err
	}
	st, err := i.cfg.Store.InsertTelemetry(ctx, b.batches)
	t1 := time.Now()
	i.commitNS.Add(int64(t1.Sub(t0)))
	if err != nil {
		return err
	}
	// Committed: now, and only now, acknowledge.
	stale := st.Stale // ascending indexes into b.batches
	conflicts := st.Conflicts
	for k, m := range b.msgs {
		if len(conflicts) > 0 && conflicts[0] == k {
			conflicts = conflicts[1:]
			i.rejectConflict(ctx, m, b.batches[k])
			continue
		}
		if len(stale) > 0 && stale[0] == k {
			stale = stale[1:]
			i.stale.Add(1)
			i.rejects.Add("telemetry", "stale_token")
			_ = m.TermWithReason("stale fencing token")
			continue
		}
		_ = m.Ack()
	}
	i.ackNS.Add(int64(time.Since(t1)))
	i.telMsgs.Add(uint64(st.Batches))
	i.samples.Add(uint64(st.Samples))
	i.inserted.Add(uint64(st.Inserted))
	return nil
}

// storedAgo is how long before at m was stored in its stream (0 when
// unknown): with the commit and hook times in the debug log, where a
// result's time goes.
func storedAgo(m jetstream.Msg, at time.Time) time.Duration {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return at.Sub(md.Timestamp)
}

// resultIdleWait is how long an idle results consumer waits for a first
// message before asking again; it adds no latency (see fetchNow).
const resultIdleWait = 500 * time.Millisecond

// fetchNow returns the messages available now, up to n, without waiting
// for more; when none are, it waits up to idle for the first one and
// returns it the moment it arrives, with whatever came alongside. A
// backlog is thus read in batches of n, and a lone message (a result the
// scheduler waits for) is never held back to fill a batch.
func fetchNow(c jetstream.Consumer, n int, idle time.Duration) ([]jetstream.Msg, error) {
	mb, err := c.FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	msgs := drain(mb, nil)
	if len(msgs) > 0 {
		return msgs, nil
	}
	if mb, err = c.Fetch(1, jetstream.FetchMaxWait(idle)); err != nil {
		return nil, err
	}
	if msgs = drain(mb, nil); len(msgs) == 0 || n == 1 {
		return msgs, nil
	}
	if mb, err = c.FetchNoWait(n - 1); err != nil {
		return msgs, nil //nolint:nilerr // handle the one in hand; the next fetch reports
	}
	return drain(mb, msgs), nil
}

func drain(mb jetstream.MessageBatch, msgs []jetstream.Msg) []jetstream.Msg {
	for m := range mb.Messages() {
		msgs = append(msgs, m)
	}
	return msgs
}

// committedResult is a result committed to the store, waiting for its
// Reporter.Finished and acknowledgement.
type committedResult struct {
	m         jetstream.Msg
	run       *store.Run
	redeliver bool
	stored    time.Time // when its worker picked it up
	commit    time.Duration
}

// finish reports a committed result as finished and acknowledges it.
func (i *Ingester) finish(ctx context.Context, h committedResult) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), i.cfg.AckWait)
	defer cancel()
	hookStart := time.Now()
	i.cfg.Reporter.Finished(hctx, h.run)
	_ = h.m.Ack()
	i.cfg.Reporter.Phase("result_hook_wait", hookStart.Sub(h.stored.Add(h.commit)))
	i.cfg.Reporter.Phase("result_hook", time.Since(hookStart))
	if h.redeliver {
		return
	}
	i.results.Add(1)
	i.log.DebugContext(hctx, "ingest: run completed", "run_id", h.run.ID, "state", h.run.State,
		"stored_ago", storedAgo(h.m, h.stored), "commit", h.commit, "hook_wait", hookStart.Sub(h.stored.Add(h.commit)), "hook", time.Since(hookStart))
}
