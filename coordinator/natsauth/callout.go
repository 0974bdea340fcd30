package natsauth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/lesfarm/lesfarm/coordinator/store"
)

// CalloutSubject is where a NATS server configured with auth_callout sends
// its authorization requests.
const CalloutSubject = server.AuthCalloutSubject

// CalloutQueue is the queue group the coordinators' callout services share,
// so each request is answered once.
const CalloutQueue = "lesfarm-auth-callout"

// CalloutConfig configures a Callout. Verifier and IssuerSeed are required.
type CalloutConfig struct {
	// Verifier checks device secrets (*store.Store).
	Verifier Verifier
	// IssuerSeed is the seed of the account nkey (SA...) whose public key
	// is the server's auth_callout.issuer: it signs the responses and the
	// user JWTs, so the server trusts them.
	IssuerSeed string
	// Account is the account the devices are placed in; empty means the
	// global account of a server-config (non-operator) setup, "$G".
	Account string
	// RunOnlySubjects: see Config.RunOnlySubjects.
	RunOnlySubjects bool
	// UserTTL is how long an issued device authorization lasts (default
	// 10m). The server disconnects the device when it expires and the
	// device reconnects through the callout again, so it bounds how long a
	// revoked credential's open connection lives.
	UserTTL time.Duration
	// VerifyTimeout bounds one credential lookup (default 3s; the
	// server's auth timeout is usually 2s, and an answer past it is
	// wasted).
	VerifyTimeout time.Duration
	// XKeySeed, when set, is the seed of a curve nkey (SX...) whose public
	// key is the server's auth_callout.xkey: the server then encrypts each
	// request (which carries the device's secret) to it, and the answers
	// (which carry the user JWT) are encrypted back to the server's own
	// xkey, so neither can be read on the way. Requests that are not
	// encrypted are then ignored.
	XKeySeed string
	Logger   *slog.Logger
}

// Callout serves NATS auth callout for an external NATS server (or
// cluster): the server hands each connecting client's credentials to it,
// and it answers with a user JWT carrying DevicePermissions for the device
// the credential belongs to, or refuses. A standalone NATS cluster thus
// enforces the same per-device subjects as the embedded server's
// Authenticator. Start it on a connection of one of the server's
// auth_callout.auth_users; several coordinators may serve it at once.
// It is safe for concurrent use.
type Callout struct {
	cfg    CalloutConfig
	log    *slog.Logger
	issuer nkeys.KeyPair
	xkey   nkeys.KeyPair // nil: requests in the clear
	sub    *nats.Subscription

	granted, refused, failed atomic.Uint64
}

// NewCallout validates cfg and returns a Callout ready to Start.
func NewCallout(cfg CalloutConfig) (*Callout, error) {
	if cfg.Verifier == nil {
		return nil, errors.New("natsauth callout config: Verifier is required")
	}
	kp, err := nkeys.FromSeed([]byte(cfg.IssuerSeed))
	if err != nil {
		return nil, fmt.Errorf("natsauth callout config: issuer seed: %w", err)
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return nil, errors.New("natsauth callout config: the issuer seed must be an account nkey seed (SA...)")
	}
	cfg.Account = cmp.Or(cfg.Account, server.DEFAULT_GLOBAL_ACCOUNT)
	cfg.UserTTL = cmp.Or(cfg.UserTTL, 10*time.Minute)
	cfg.VerifyTimeout = cmp.Or(cfg.VerifyTimeout, 3*time.Second)
	c := &Callout{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), issuer: kp}
	if cfg.XKeySeed != "" {
		xk, err := nkeys.FromCurveSeed([]byte(cfg.XKeySeed))
		if err != nil {
			return nil, errors.New("natsauth callout config: the xkey seed must be a curve nkey seed (SX...)")
		}
		c.xkey = xk
	}
	return c, nil
}

// XKeyPublicKey returns the public curve key to configure as the server's
// auth_callout.xkey, or "" without XKeySeed.
func (c *Callout) XKeyPublicKey() string {
	if c.xkey == nil {
		return ""
	}
	pub, _ := c.xkey.PublicKey()
	return pub
}

// IssuerPublicKey returns the public account key to configure as the
// server's auth_callout.issuer.
func (c *Callout) IssuerPublicKey() string {
	pub, _ := c.issuer.PublicKey()
	return pub
}

// Start subscribes to the callout subject on nc.
func (c *Callout) Start(nc *nats.Conn) error {
	sub, err := nc.QueueSubscribe(CalloutSubject, CalloutQueue, c.handle)
	if err != nil {
		return fmt.Errorf("natsauth: callout: %w", err)
	}
	c.sub = sub
	return nc.Flush()
}

// Stop unsubscribes.
func (c *Callout) Stop() {
	if c.sub != nil {
		_ = c.sub.Unsubscribe()
	}
}

// Stats returns how many requests were granted, refused (bad credential)
// and failed (malformed request, or the credential could not be checked).
func (c *Callout) Stats() (granted, refused, failed uint64) {
	return c.granted.Load(), c.refused.Load(), c.failed.Load()
}

func (c *Callout) handle(m *nats.Msg) {
	data := m.Data
	serverXKey := m.Header.Get(server.AuthRequestXKeyHeader)
	if c.xkey != nil {
		if serverXKey == "" {
			c.failed.Add(1)
			c.log.Warn("natsauth: callout: request not encrypted, but an xkey is configured (set the server's auth_callout.xkey); ignored")
			return
		}
		var err error
		if data, err = c.xkey.Open(m.Data, serverXKey); err != nil {
			c.failed.Add(1)
			c.log.Warn("natsauth: callout: cannot decrypt request (is the server's auth_callout.xkey this seed's public key?)", "err", err)
			return
		}
	}
	req, err := jwt.DecodeAuthorizationRequestClaims(string(data))
	if err != nil {
		// Not a request the server signed for us: nothing to answer to.
		c.failed.Add(1)
		c.log.Warn("natsauth: callout: malformed authorization request", "err", err)
		return
	}
	o := req.ConnectOptions
	deviceID, why, err := c.authorize(o.Username, o.Password, o.Token)
	if err != nil {
		// The database could not answer: no response, so the client's
		// attempt times out (a temporary failure it retries) instead of
		// being refused (see Config.UnavailableWait).
		c.failed.Add(1)
		c.log.Warn("natsauth: callout: device credential not checkable, the device will retry", "user", o.Username, "err", err)
		return
	}
	if why != "" {
		c.refused.Add(1)
		c.log.Warn("natsauth: callout: connection refused", "user", o.Username, "host", req.ClientInformation.Host, "reason", why)
		c.respond(m, req, serverXKey, "", why)
		return
	}
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Name = deviceID
	uc.Audience = c.cfg.Account
	uc.Expires = time.Now().Add(c.cfg.UserTTL).Unix()
	p := DevicePermissions(deviceID, c.cfg.RunOnlySubjects)
	uc.Pub.Allow.Add(p.Publish.Allow...)
	uc.Sub.Allow.Add(p.Subscribe.Allow...)
	uc.Resp = &jwt.ResponsePermission{MaxMsgs: p.Response.MaxMsgs, Expires: p.Response.Expires}
	userJWT, err := uc.Encode(c.issuer)
	if err != nil {
		c.failed.Add(1)
		c.log.Error("natsauth: callout: sign user", "device_id", deviceID, "err", err)
		return
	}
	c.granted.Add(1)
	c.log.Debug("natsauth: callout: device authorized", "device_id", deviceID, "host", req.ClientInformation.Host)
	c.respond(m, req, serverXKey, userJWT, "")
}

// authorize returns the device a credential belongs to, or why it is
// refused; an error means it could not be checked.
func (c *Callout) authorize(user, password, token string) (deviceID, why string, err error) {
	secret := cmp.Or(password, token)
	if secret == "" {
		return "", "no credential (lesfarm token create --device ID)", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.VerifyTimeout)
	defer cancel()
	cred, err := c.cfg.Verifier.VerifyDeviceCredential(ctx, secret)
	switch {
	case errors.Is(err, store.ErrBadDeviceCredential):
		return "", "invalid or revoked device credential", nil
	case err != nil:
		return "", "", err
	case user != "" && user != cred.DeviceID:
		return "", "credential belongs to device " + cred.DeviceID, nil
	}
	return cred.DeviceID, "", nil
}

// respond signs the answer and, when the request was encrypted, encrypts
// it to the server's xkey.
func (c *Callout) respond(m *nats.Msg, req *jwt.AuthorizationRequestClaims, serverXKey, userJWT, refusal string) {
	rc := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	rc.Audience = req.Server.ID
	rc.Jwt = userJWT
	rc.Error = refusal
	signed, err := rc.Encode(c.issuer)
	if err != nil {
		c.log.Error("natsauth: callout: sign response", "err", err)
		return
	}
	data := []byte(signed)
	if c.xkey != nil {
		if data, err = c.xkey.Seal(data, serverXKey); err != nil {
			c.log.Error("natsauth: callout: encrypt response", "err", err)
			return
		}
	}
	if err := m.Respond(data); err != nil {
		c.log.Warn("natsauth: callout: respond", "err", err)
	}
}
