package telemetry

import (
	"context"
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

// Publish implements Publisher.
func (p *JetStreamPublisher) Publish(ctx context.Context, r Record) error {
	var opts []jetstream.PublishOpt
	if r.MsgID != "" {
		opts = append(opts, jetstream.WithMsgID(r.MsgID))
	}
	_, err := p.js.Publish(ctx, r.Subject, r.Data, opts...)
	return err
}

// Connected implements Publisher.
func (p *JetStreamPublisher) Connected() bool { return p.nc.IsConnected() }
