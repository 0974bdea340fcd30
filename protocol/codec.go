package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Message is implemented by every message type of the protocol.
type Message interface {
	// MessageType names the type, e.g. "hello", for errors and metrics.
	MessageType() string
	// Validate checks the message's fields and returns a one-line error.
	Validate() error
	maxBytes() int
	setVersion()
	version() int
}

// Reject kinds of a DecodeError.
const (
	RejectOversized = "oversized"
	RejectMalformed = "malformed"
	RejectVersion   = "version"
	RejectInvalid   = "invalid"
	RejectSignature = "signature"
)

// DecodeError is returned by every decoder for a rejected message.
type DecodeError struct {
	Type string // message type, e.g. "telemetry"
	Kind string // one of the Reject* kinds
	Err  error
}

// Error implements error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("protocol: %s message rejected (%s): %v", e.Type, e.Kind, e.Err)
}

// Unwrap returns the cause.
func (e *DecodeError) Unwrap() error { return e.Err }

// RejectKind returns the Reject* kind of err when it is a *DecodeError, and ""
// otherwise.
func RejectKind(err error) string {
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Kind
	}
	return ""
}

// Encode sets the message's version, validates it and marshals it. It fails
// when the message is invalid or larger than its type's limit, so a sender
// never emits what a receiver would reject.
func Encode(m Message) ([]byte, error) {
	m.setVersion()
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("protocol: encode %s: %w", m.MessageType(), err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("protocol: encode %s: %w", m.MessageType(), err)
	}
	if len(b) > m.maxBytes() {
		return nil, fmt.Errorf("protocol: encode %s: %d bytes exceeds the %d-byte limit", m.MessageType(), len(b), m.maxBytes())
	}
	return b, nil
}

// decodeInto is the shared decoder: size limit, JSON, version, validation.
// Unknown fields are ignored, so a newer peer may add optional fields
// without a version bump.
func decodeInto(data []byte, m Message) error {
	return decodeWith(data, m, func() error { return json.Unmarshal(data, m) })
}

// decodeWith is decodeInto with unmarshal filling m from data.
func decodeWith(data []byte, m Message, unmarshal func() error) error {
	typ := m.MessageType()
	if len(data) > m.maxBytes() {
		return &DecodeError{Type: typ, Kind: RejectOversized, Err: fmt.Errorf("%d bytes exceeds the %d-byte limit", len(data), m.maxBytes())}
	}
	if err := unmarshal(); err != nil {
		return &DecodeError{Type: typ, Kind: RejectMalformed, Err: cleanJSONError(err)}
	}
	switch v := m.version(); {
	case v == 0:
		return &DecodeError{Type: typ, Kind: RejectVersion, Err: errors.New(`missing protocol version "v"`)}
	case v != Version:
		return &DecodeError{Type: typ, Kind: RejectVersion, Err: fmt.Errorf("unsupported protocol version %d (this build speaks %d)", v, Version)}
	}
	if err := m.Validate(); err != nil {
		return &DecodeError{Type: typ, Kind: RejectInvalid, Err: err}
	}
	return nil
}

func cleanJSONError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "json: ")
	msg = strings.ReplaceAll(msg, "protocol.", "")
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return errors.New(msg)
}

// DecodeHello decodes and validates a Hello.
func DecodeHello(data []byte) (*Hello, error) { return decode[Hello](data) }

// DecodeHelloReply decodes and validates a HelloReply.
func DecodeHelloReply(data []byte) (*HelloReply, error) { return decode[HelloReply](data) }

// DecodeHeartbeat decodes and validates a Heartbeat.
func DecodeHeartbeat(data []byte) (*Heartbeat, error) { return decode[Heartbeat](data) }

// DecodeHeartbeatReply decodes and validates a HeartbeatReply.
func DecodeHeartbeatReply(data []byte) (*HeartbeatReply, error) {
	return decode[HeartbeatReply](data)
}

// DecodeSignedAssignment decodes the envelope of an assignment without
// checking the signature; use OpenAssignment to verify and decode it.
func DecodeSignedAssignment(data []byte) (*SignedAssignment, error) {
	return decode[SignedAssignment](data)
}

// DecodeAssignment decodes and validates an Assignment's JSON (the payload
// of a SignedAssignment). It does not check any signature.
func DecodeAssignment(data []byte) (*Assignment, error) { return decode[Assignment](data) }

// DecodeAssignReply decodes and validates an AssignReply.
func DecodeAssignReply(data []byte) (*AssignReply, error) { return decode[AssignReply](data) }

// DecodeCancel decodes and validates a Cancel.
func DecodeCancel(data []byte) (*Cancel, error) { return decode[Cancel](data) }

// DecodeCancelReply decodes and validates a CancelReply.
func DecodeCancelReply(data []byte) (*CancelReply, error) { return decode[CancelReply](data) }

// DecodeTelemetry decodes and validates a TelemetryBatch. It decodes the
// wire form directly: through json.Unmarshal of the batch, whose
// UnmarshalJSON decodes the wire form again, encoding/json scanned the
// whole message (mostly the base64 samples) twice more, which made
// decoding the coordinator's largest cost at 1,000 agents. The result and
// the errors are the same.
func DecodeTelemetry(data []byte) (*TelemetryBatch, error) {
	m := &TelemetryBatch{}
	if err := decodeWith(data, m, func() error { return m.unmarshalJSON(data) }); err != nil {
		return nil, err
	}
	return m, nil
}

// DecodeResult decodes and validates a Result.
func DecodeResult(data []byte) (*Result, error) { return decode[Result](data) }

func decode[T any, P interface {
	*T
	Message
}](data []byte) (*T, error) {
	var v T
	if err := decodeInto(data, P(&v)); err != nil {
		return nil, err
	}
	return &v, nil
}

// RejectCounter counts rejected messages by type and kind. The zero value is
// ready to use and it is safe for concurrent use.
type RejectCounter struct {
	mu     sync.Mutex
	counts map[RejectKey]uint64
}

// RejectKey identifies a counter.
type RejectKey struct {
	Type string // message type, or "unknown"
	Kind string // Reject* kind
}

// Observe counts err when it is a *DecodeError and returns err unchanged, so
// callers can write `if err := c.Observe(decode()); err != nil`.
func (c *RejectCounter) Observe(err error) error {
	var de *DecodeError
	if errors.As(err, &de) {
		c.Add(de.Type, de.Kind)
	}
	return err
}

// Add counts one rejected message.
func (c *RejectCounter) Add(typ, kind string) {
	c.mu.Lock()
	if c.counts == nil {
		c.counts = map[RejectKey]uint64{}
	}
	c.counts[RejectKey{typ, kind}]++
	c.mu.Unlock()
}

// Snapshot returns a copy of the counts.
func (c *RejectCounter) Snapshot() map[RejectKey]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[RejectKey]uint64, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// Total returns the number of rejected messages counted.
func (c *RejectCounter) Total() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, v := range c.counts {
		n += v
	}
	return n
}

// String lists the counts, sorted, e.g. "telemetry/malformed=2".
func (c *RejectCounter) String() string {
	snap := c.Snapshot()
	parts := make([]string, 0, len(snap))
	for k, v := range snap {
		parts = append(parts, fmt.Sprintf("%s/%s=%d", k.Type, k.Kind, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
