package telemetry

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamPublisher publishes records to JetStream with the record's MsgID
// as Nats-Msg-Id, so a record re-sent after a lost ack is stored once.
type JetStreamPublisher struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// NewJetStreamPublisher returns a Publisher on nc.
func NewJetStreamPublisher(nc *nats.Conn) (*JetStreamPublisher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("telemetry: jetstream: %w", err)
	}
	return &JetStreamPublisher{nc: nc, js: js}, nil
}

// ErrDuplicate is returned (wrapped) by a Publisher when the server
// acknowledged a record as a duplicate of one it already holds under the
// same MsgID: the record itself was not stored.
var ErrDuplicate = errors.New("telemetry: acknowledged as a duplicate")

// Publish implements Publisher. An ack with Duplicate set returns an error
// wrapping ErrDuplicate: the Outbox decides whether the stored copy is the
// record's own (a re-send after a lost ack) or another publisher's.
func (p *JetStreamPublisher) Publish(ctx context.Context, r Record) error {
	var opts []jetstream.PublishOpt
	if r.MsgID != "" {
		opts = append(opts, jetstream.WithMsgID(r.MsgID))
	}
	ack, err := p.js.Publish(ctx, r.Subject, r.Data, opts...)
	if err == nil && ack != nil && ack.Duplicate {
		return fmt.Errorf("%w of stream %s message %d", ErrDuplicate, ack.Stream, ack.Sequence)
	}
	return err
}

// Connected implements Publisher.
func (p *JetStreamPublisher) Connected() bool { return p.nc.IsConnected() }
