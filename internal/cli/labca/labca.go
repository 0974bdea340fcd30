// Package labca makes the self-signed certificate authority of a lab farm
// and the coordinator's server certificate it signs (lesfarm tls init):
// one ECDSA P-256 CA whose ca.pem every agent and CLI is given (--tls-ca,
// --ca or LESFARM_CA), and a server certificate with the coordinator's
// host names and IP addresses as subject alternative names, used by both
// its HTTPS and its NATS listener.
//
// Files in the directory:
//
//	ca.pem          the CA certificate (public: give it to agents and CLIs)
//	ca-key.pem      the CA's private key (0600; keep it to issue new server certificates)
//	server.pem      the server certificate (lesfarm serve --tls-cert)
//	server-key.pem  its private key (0600; lesfarm serve --tls-key)
//
// Only crypto/x509 from the standard library is used.
package labca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// File names inside the directory given to Init.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
)

// Options configure Init. Zero fields take the documented defaults.
type Options struct {
	// CAValidity is how long a new CA is valid (default 10 years). An
	// existing CA in the directory is reused as it is.
	CAValidity time.Duration
	// ServerValidity is how long the server certificate is valid (default
	// 825 days, the longest that clients accept for a server certificate).
	ServerValidity time.Duration
	// Now is the issue time (default time.Now; tests set it).
	Now func() time.Time
}

// Result says what Init wrote.
type Result struct {
	Dir string
	// NewCA is false when an existing ca.pem/ca-key.pem was reused (the
	// agents' copy of ca.pem stays valid).
	NewCA bool
	// CAFingerprint is the sha256 of the CA certificate (DER), in hex.
	CAFingerprint string
	// DNSNames and IPs are the server certificate's alternative names.
	DNSNames []string
	IPs      []net.IP
	// NotAfter is when the server certificate expires.
	NotAfter time.Time
}

// ErrBadHost is wrapped by the errors of SplitHosts (and Init) for a host
// list that cannot go into a certificate.
var ErrBadHost = errors.New("labca: bad --host")

// dnsNameRE is a host name, optionally with a leading "*." wildcard.
var dnsNameRE = regexp.MustCompile(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

// SplitHosts parses a comma-separated list of host names and IP addresses
// into the two kinds of alternative names. It rejects an empty list and
// anything that is neither.
func SplitHosts(hosts []string) (dns []string, ips []net.IP, err error) {
	seen := map[string]bool{}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" || seen[strings.ToLower(h)] {
			continue
		}
		seen[strings.ToLower(h)] = true
		if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if len(h) > 253 || !dnsNameRE.MatchString(h) {
			return nil, nil, fmt.Errorf("%w: %q is neither an IP address nor a DNS name", ErrBadHost, h)
		}
		dns = append(dns, strings.ToLower(h))
	}
	if len(dns)+len(ips) == 0 {
		return nil, nil, fmt.Errorf("%w: no host: give the names and addresses agents use to reach the coordinator", ErrBadHost)
	}
	return dns, ips, nil
}

// Init makes (or reuses) the CA in dir and issues a server certificate for
// hosts (DNS names and IP addresses agents reach the coordinator by). The
// directory is created 0700 if missing. Keys are written 0600, each file
// atomically (temp file, fsync, rename).
func Init(dir string, hosts []string, o Options) (*Result, error) {
	dns, ips, err := SplitHosts(hosts)
	if err != nil {
		return nil, err
	}
	if o.CAValidity <= 0 {
		o.CAValidity = 10 * 365 * 24 * time.Hour
	}
	if o.ServerValidity <= 0 {
		o.ServerValidity = 825 * 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("labca: %w", err)
	}
	now := o.Now().Add(-time.Minute).UTC() // tolerate small clock differences
	res := &Result{Dir: dir, DNSNames: dns, IPs: ips}

	ca, caKey, err := loadCA(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if ca, caKey, err = newCA(now, o.CAValidity); err != nil {
			return nil, err
		}
		if err := writePEM(filepath.Join(dir, CAKeyFile), 0o600, keyBlock(caKey)); err != nil {
			return nil, err
		}
		if err := writePEM(filepath.Join(dir, CAFile), 0o644, &pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}); err != nil {
			return nil, err
		}
		res.NewCA = true
	case err != nil:
		return nil, err
	}
	sum := sha256.Sum256(ca.Raw)
	res.CAFingerprint = hex.EncodeToString(sum[:])

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("labca: server key: %w", err)
	}
	notAfter := now.Add(o.ServerValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	cn := "lesfarm coordinator"
	if len(dns) > 0 {
		cn = dns[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"lesfarm lab"}},
		NotBefore:    now, NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dns, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("labca: server certificate: %w", err)
	}
	// The key first: a certificate without its key would fail to load.
	if err := writePEM(filepath.Join(dir, ServerKeyFile), 0o600, keyBlock(key)); err != nil {
		return nil, err
	}
	if err := writePEM(filepath.Join(dir, ServerFile), 0o644, &pem.Block{Type: "CERTIFICATE", Bytes: der}); err != nil {
		return nil, err
	}
	res.NotAfter = notAfter
	return res, nil
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("labca: CA key: %w", err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "lesfarm lab CA " + host, Organization: []string{"lesfarm lab"}},
		NotBefore:             now,
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("labca: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("labca: CA certificate: %w", err)
	}
	return ca, key, nil
}

// loadCA reads an existing CA; os.ErrNotExist when there is none. A CA
// certificate without its key (or the reverse) is an error, not a reason to
// make a new CA silently.
func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, cerr := os.ReadFile(filepath.Join(dir, CAFile))
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, CAKeyFile))
	switch {
	case errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist):
		return nil, nil, os.ErrNotExist
	case cerr != nil:
		return nil, nil, fmt.Errorf("labca: %s has a CA key but no readable CA certificate: %v", dir, cerr)
	case kerr != nil:
		return nil, nil, fmt.Errorf("labca: %s has a CA certificate but no readable CA key (%s): %v", dir, CAKeyFile, kerr)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("labca: existing CA in %s: %w", dir, err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("labca: existing CA in %s: %w", dir, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !ca.IsCA {
		return nil, nil, fmt.Errorf("labca: %s in %s is not an ECDSA CA made by lesfarm tls init", CAFile, dir)
	}
	return ca, key, nil
}

func keyBlock(k *ecdsa.PrivateKey) *pem.Block {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return &pem.Block{Type: "PRIVATE KEY", Bytes: der}
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// writePEM writes b to path atomically with mode perm.
func writePEM(path string, perm os.FileMode, b *pem.Block) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("labca: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			err = fmt.Errorf("labca: write %s: %w", path, err)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := pem.Encode(f, b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// LoadPool reads a PEM file of CA certificates (ca.pem) into a pool. It
// fails when the file holds none.
func LoadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// ServerConfig loads a server certificate and key (server.pem,
// server-key.pem) into a TLS 1.2+ server configuration.
func ServerConfig(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("a TLS server needs both a certificate and a key file")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// PinnedClientConfig returns a client TLS configuration that trusts
// exactly the leaf certificate of server (whatever names it carries): for
// a process connecting to its own listener, e.g. lesfarm serve's
// coordinator to its embedded NATS at 127.0.0.1.
func PinnedClientConfig(server *tls.Config) (*tls.Config, error) {
	if server == nil || len(server.Certificates) == 0 || len(server.Certificates[0].Certificate) == 0 {
		return nil, errors.New("labca: pinned client: no server certificate")
	}
	leaf := server.Certificates[0].Certificate[0]
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is checked below against the pinned leaf, not against
		// roots and names.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], leaf) {
				return errors.New("labca: server certificate is not the pinned one")
			}
			return nil
		},
	}, nil
}
