package protocol

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
)

// GenerateSigningKey returns a new ed25519 key pair for signing assignments.
func GenerateSigningKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// SignAssignment validates a, marshals it and signs the bytes with key. The
// result is ready to publish on AssignSubject(a.DeviceID).
func SignAssignment(a *Assignment, key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("protocol: sign assignment: bad private key")
	}
	payload, err := Encode(a)
	if err != nil {
		return nil, err
	}
	return Encode(&SignedAssignment{Assignment: payload, Signature: ed25519.Sign(key, payload)})
}

// OpenAssignment decodes a SignedAssignment, verifies its signature with
// pub, then decodes and validates the assignment. A missing or wrong
// signature is a *DecodeError of kind RejectSignature.
func OpenAssignment(data []byte, pub ed25519.PublicKey) (*Assignment, error) {
	sa, err := DecodeSignedAssignment(data)
	if err != nil {
		return nil, err
	}
	if len(pub) != ed25519.PublicKeySize {
		return nil, &DecodeError{Type: "assignment", Kind: RejectSignature, Err: errors.New("no coordinator signing key known")}
	}
	if !ed25519.Verify(pub, sa.Assignment, sa.Signature) {
		return nil, &DecodeError{Type: "assignment", Kind: RejectSignature, Err: errors.New("signature does not verify")}
	}
	return DecodeAssignment(sa.Assignment)
}

// PeekAssignment returns the run id and token of a signed assignment without
// verifying it, so an agent can address a refusal for a message it cannot
// trust. It returns zeros when they cannot be read.
func PeekAssignment(data []byte) (runID, token int64) {
	var sa struct {
		Assignment json.RawMessage `json:"assignment"`
	}
	if len(data) > MaxAssignmentBytes+1024 || json.Unmarshal(data, &sa) != nil {
		return 0, 0
	}
	var a struct {
		RunID int64 `json:"run_id"`
		Token int64 `json:"token"`
	}
	if json.Unmarshal(sa.Assignment, &a) != nil {
		return 0, 0
	}
	return a.RunID, a.Token
}

// KeyID returns a short printable id of a public key (for logs).
func KeyID(pub ed25519.PublicKey) string {
	if len(pub) < 6 {
		return ""
	}
	return fmt.Sprintf("%x", pub[:6])
}
