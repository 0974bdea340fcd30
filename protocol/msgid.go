package protocol

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Message ids (the JetStream Nats-Msg-Id header) of telemetry and results.
//
// JetStream de-duplicates by Nats-Msg-Id across a whole stream, whatever
// the subject: a message whose id was already stored within the stream's
// duplicate window is acknowledged as a duplicate and dropped. An id another
// device can predict is therefore a way to suppress that device's data: the
// attacker publishes junk, on its own permitted subject, under the victim's
// next id first. So an id names its publisher and carries a nonce that only
// the publishing agent knows:
//
//	r/<device>/<run>/<token>/<nonce>          a run's result
//	t/<device>/<run>/<token>/<seq>/<nonce>    a telemetry batch
//
// The nonce is 16 lowercase hex digits (64 random bits) chosen per run
// attempt (NewMsgNonce); a record keeps its id across re-sends, so a copy
// re-sent after a lost ack is still stored once. Ingest rejects a message
// whose id names another device or run than its subject, or another token
// or seq than its body (CheckDataMsgID), and counts the rejection against
// the publishing device. Messages without an id are accepted (they can
// never shadow another message).

// Message id kinds.
const (
	MsgIDResult    = "r"
	MsgIDTelemetry = "t"
)

// msgNonceLen is the length of a nonce: 16 hex digits.
const msgNonceLen = 16

// NewMsgNonce returns a fresh random nonce for the message ids of one run
// attempt.
func NewMsgNonce() string {
	var b [msgNonceLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ResultMsgID returns the message id of a run attempt's result.
func ResultMsgID(deviceID string, runID, token int64, nonce string) string {
	return MsgIDResult + "/" + deviceID + "/" + strconv.FormatInt(runID, 10) + "/" + strconv.FormatInt(token, 10) + "/" + nonce
}

// TelemetryMsgID returns the message id of a run attempt's telemetry batch
// seq.
func TelemetryMsgID(deviceID string, runID, token int64, seq uint64, nonce string) string {
	return MsgIDTelemetry + "/" + deviceID + "/" + strconv.FormatInt(runID, 10) + "/" + strconv.FormatInt(token, 10) + "/" +
		strconv.FormatUint(seq, 10) + "/" + nonce
}

// MsgID is a parsed message id.
type MsgID struct {
	Kind     string // MsgIDResult or MsgIDTelemetry
	DeviceID string
	RunID    int64
	Token    int64
	Seq      uint64 // telemetry only
	Nonce    string
}

// ParseMsgID parses a result or telemetry message id.
func ParseMsgID(id string) (*MsgID, error) {
	f := strings.Split(id, "/")
	var m MsgID
	switch {
	case len(f) == 5 && f[0] == MsgIDResult, len(f) == 6 && f[0] == MsgIDTelemetry:
		m.Kind = f[0]
	default:
		return nil, fmt.Errorf("msg id %q is not r/<device>/<run>/<token>/<nonce> or t/<device>/<run>/<token>/<seq>/<nonce>", clip(id))
	}
	if !ValidDeviceID(f[1]) {
		return nil, fmt.Errorf("msg id %q: bad device id", clip(id))
	}
	m.DeviceID = f[1]
	var err1, err2 error
	m.RunID, err1 = strconv.ParseInt(f[2], 10, 64)
	m.Token, err2 = strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || m.RunID <= 0 || m.Token <= 0 {
		return nil, fmt.Errorf("msg id %q: bad run or token", clip(id))
	}
	if m.Kind == MsgIDTelemetry {
		seq, err := strconv.ParseUint(f[4], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("msg id %q: bad seq", clip(id))
		}
		m.Seq = seq
	}
	m.Nonce = f[len(f)-1]
	if !validNonce(m.Nonce) {
		return nil, fmt.Errorf("msg id %q: nonce must be %d lowercase hex digits", clip(id), msgNonceLen)
	}
	return &m, nil
}

func validNonce(s string) bool {
	if len(s) != msgNonceLen {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// RenewMsgID returns id with a fresh nonce: for a record whose first
// publish was acknowledged as a duplicate (another publisher took its id),
// so it can still be stored. An id that is not a device-scoped message id
// is returned with a fresh nonce appended after '/'.
func RenewMsgID(id string) string {
	if m, err := ParseMsgID(id); err == nil {
		if m.Kind == MsgIDResult {
			return ResultMsgID(m.DeviceID, m.RunID, m.Token, NewMsgNonce())
		}
		return TelemetryMsgID(m.DeviceID, m.RunID, m.Token, m.Seq, NewMsgNonce())
	}
	return id + "/" + NewMsgNonce()
}

// ErrMsgIDMismatch is wrapped by CheckDataMsgID's errors.
var ErrMsgIDMismatch = errors.New("msg id does not match the message")

// CheckDataMsgID checks the message id of a telemetry batch or result
// against the subject it was published on and the device, run, token and
// (for telemetry) seq of its body. An empty id is accepted. The
// returned error is a *DecodeError of kind RejectInvalid wrapping
// ErrMsgIDMismatch, for typ ("telemetry" or "result").
func CheckDataMsgID(typ, id, subject, deviceID string, runID, token int64, seq uint64) error {
	if id == "" {
		return nil
	}
	bad := func(format string, args ...any) error {
		return &DecodeError{Type: typ, Kind: RejectInvalid, Err: fmt.Errorf("%w: %s", ErrMsgIDMismatch, fmt.Sprintf(format, args...))}
	}
	m, err := ParseMsgID(id)
	if err != nil {
		return bad("%v", err)
	}
	want := MsgIDResult
	if typ == "telemetry" {
		want = MsgIDTelemetry
	}
	dev, run, err := ParseDataSubject(subject)
	switch {
	case err != nil:
		return bad("%v", err)
	case m.Kind != want:
		return bad("msg id %q is not a %s id", clip(id), typ)
	case dev != "" && m.DeviceID != dev:
		return bad("msg id names device %q, the subject %s another", m.DeviceID, clip(subject))
	case m.DeviceID != deviceID:
		return bad("msg id names device %q, the message device %q", m.DeviceID, deviceID)
	case m.RunID != run || m.RunID != runID:
		return bad("msg id names run %d, the message run %d", m.RunID, runID)
	case m.Token != token:
		return bad("msg id names token %d, the message token %d", m.Token, token)
	case typ == "telemetry" && m.Seq != seq:
		return bad("msg id names seq %d, the batch seq %d", m.Seq, seq)
	}
	return nil
}
