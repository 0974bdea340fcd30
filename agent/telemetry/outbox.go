package telemetry

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lesfarm/lesfarm/protocol"
)

// Publisher delivers one record and returns once the server acknowledged
// it (a JetStream publish ack). Connected reports whether publishing can be
// attempted now; while it returns false the Outbox buffers without trying.
type Publisher interface {
	Publish(ctx context.Context, r Record) error
	Connected() bool
}

// OutboxConfig configures an Outbox.
type OutboxConfig struct {
	// Buffer holds records while NATS is unreachable (required).
	Buffer *Buffer
	// Publisher delivers records (required).
	Publisher Publisher
	// Queue is the in-memory queue length in front of the publisher; when
	// it is full, records go straight to the Buffer. 0 means 256.
	Queue int
	// PublishTimeout bounds one publish; 0 means 5 s.
	PublishTimeout time.Duration
	// RetryEvery is how often a disconnected Outbox checks the connection;
	// 0 means 200 ms.
	RetryEvery time.Duration
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Outbox publishes records in the background, spilling to the Buffer while
// publishing fails and draining it, oldest first, once publishing works
// again. Send never blocks on the network. It is safe for concurrent use.
type Outbox struct {
	cfg  OutboxConfig
	log  *slog.Logger
	mem  chan Record
	wake chan struct{}

	published  atomic.Uint64
	spilled    atomic.Uint64
	duplicates atomic.Uint64 // first publishes acknowledged as duplicates

	mu      sync.Mutex
	pending int // records accepted by Send and not yet published or buffered
	idle    *sync.Cond
}

// NewOutbox returns an Outbox; call Run to start delivering.
func NewOutbox(cfg OutboxConfig) (*Outbox, error) {
	if cfg.Buffer == nil || cfg.Publisher == nil {
		return nil, errors.New("telemetry outbox config: buffer and publisher are required")
	}
	cfg.Queue = cmp.Or(cfg.Queue, 256)
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, 5*time.Second)
	cfg.RetryEvery = cmp.Or(cfg.RetryEvery, 200*time.Millisecond)
	o := &Outbox{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()),
		mem: make(chan Record, cfg.Queue), wake: make(chan struct{}, 1)}
	o.idle = sync.NewCond(&o.mu)
	return o, nil
}

// Send queues r for delivery. It does not block on the network: when the
// in-memory queue is full the record is written to the Buffer directly.
func (o *Outbox) Send(r Record) {
	o.mu.Lock()
	o.pending++
	o.mu.Unlock()
	select {
	case o.mem <- r:
	default:
		o.spill(r)
		o.done()
	}
	o.kick()
}

// Kick wakes the delivery loop, e.g. after a reconnect.
func (o *Outbox) kick() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Reconnected tells the Outbox the connection is back so it drains the
// Buffer at once instead of at the next retry tick.
func (o *Outbox) Reconnected() { o.kick() }

func (o *Outbox) spill(r Record) {
	if r.Subject == "" {
		return // nothing to keep (firstPublishFailed)
	}
	if err := o.cfg.Buffer.Append(r); err != nil {
		o.log.Error("telemetry: buffering failed, record lost", "subject", r.Subject, "msg_id", r.MsgID, "err", err)
		return
	}
	o.spilled.Add(1)
}

func (o *Outbox) done() {
	o.mu.Lock()
	o.pending--
	o.mu.Unlock()
	o.idle.Broadcast()
}

// signal wakes Flush after a state change made outside o.mu; taking the
// lock orders the change before Flush's next check.
func (o *Outbox) signal() {
	o.mu.Lock()
	o.mu.Unlock() //nolint:staticcheck // empty critical section orders the broadcast
	o.idle.Broadcast()
}

// Run delivers records until ctx is done. Records still queued in memory
// when it returns are written to the Buffer, so nothing accepted by Send is
// lost across a shutdown.
func (o *Outbox) Run(ctx context.Context) {
	tick := time.NewTicker(o.cfg.RetryEvery)
	defer tick.Stop()
	defer o.spillQueued()
	for {
		// Drain the disk buffer first so records go out roughly in order.
		if o.cfg.Buffer.Len() > 0 {
			if o.cfg.Publisher.Connected() {
				r, id, err := o.cfg.Buffer.Peek()
				if err == nil {
					// A buffered record may have been published before its
					// ack was lost: a duplicate ack is its own copy.
					if err := o.publish(ctx, r); err == nil || errors.Is(err, ErrDuplicate) {
						o.cfg.Buffer.Remove(id)
						o.signal()
						continue
					}
				}
			}
			// Disconnected or failing: move queued records to disk and wait.
			o.spillQueued()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-o.wake:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case r := <-o.mem:
			if !o.cfg.Publisher.Connected() {
				o.spill(r)
			} else if err := o.publish(ctx, r); err != nil {
				o.spill(o.firstPublishFailed(r, err))
			}
			o.done()
		case <-o.wake:
		case <-tick.C:
		}
	}
}

func (o *Outbox) spillQueued() {
	for {
		select {
		case r := <-o.mem:
			o.spill(r)
			o.done()
		default:
			return
		}
	}
}

func (o *Outbox) publish(ctx context.Context, r Record) error {
	pctx, cancel := context.WithTimeout(ctx, o.cfg.PublishTimeout)
	defer cancel()
	err := o.cfg.Publisher.Publish(pctx, r)
	if err != nil {
		o.log.Debug("telemetry: publish failed, buffering", "subject", r.Subject, "msg_id", r.MsgID, "err", err)
		return err
	}
	o.published.Add(1)
	return nil
}

// Flush waits until every record sent so far was published (the memory
// queue and the Buffer are empty) or ctx is done.
func (o *Outbox) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		o.mu.Lock()
		o.idle.Broadcast()
		o.mu.Unlock()
	})
	defer stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.pending > 0 || o.cfg.Buffer.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		o.kick()
		o.idle.Wait()
	}
	return nil
}

// firstPublishFailed returns the record to buffer after the first publish
// of r failed with err. A duplicate ack on a first publish is not success:
// the stream holds another publisher's message under r's id (a record
// never sent before cannot have a copy of its own there), so r was dropped.
// It is logged, counted (Duplicates) and returned under a fresh id
// (protocol.RenewMsgID) to be sent again. A record marked Resend may have
// been stored by an earlier process: its duplicate ack is success, and the
// zero Record (which spill skips) is returned.
func (o *Outbox) firstPublishFailed(r Record, err error) Record {
	if !errors.Is(err, ErrDuplicate) {
		return r
	}
	if r.Resend {
		o.published.Add(1)
		return Record{}
	}
	o.duplicates.Add(1)
	renewed := protocol.RenewMsgID(r.MsgID)
	o.log.Error("telemetry: first publish acknowledged as a duplicate: another publisher holds this message id; sending again under a new id",
		"subject", r.Subject, "msg_id", r.MsgID, "new_msg_id", renewed, "err", err)
	r.MsgID = renewed
	return r
}

// Duplicates returns how many records were acknowledged as duplicates on
// their first publish (see firstPublishFailed): each one is a message id
// some other publisher used first, which never happens to a well-behaved
// farm.
func (o *Outbox) Duplicates() uint64 { return o.duplicates.Load() }

// Stats returns counters: records published and records that went through
// the on-disk buffer.
func (o *Outbox) Stats() (published, spilled uint64) {
	return o.published.Load(), o.spilled.Load()
}
