package labca

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInitIssuesVerifiableServerCert(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	res, err := Init(dir, []string{"farm.lab", "127.0.0.1", "localhost", "::1", "FARM.lab"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.NewCA || len(res.DNSNames) != 2 || len(res.IPs) != 2 {
		t.Fatalf("result %+v; want a new CA, 2 DNS names (duplicates folded) and 2 IPs", res)
	}
	for name, want := range map[string]os.FileMode{CAFile: 0o644, CAKeyFile: 0o600, ServerFile: 0o644, ServerKeyFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v mode %v, want %v", name, err, fi.Mode().Perm(), want)
		}
	}
	pool, err := LoadPool(filepath.Join(dir, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf := readCert(t, filepath.Join(dir, ServerFile))
	for _, host := range []string{"farm.lab", "localhost", "127.0.0.1", "::1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.lab"}); err == nil {
		t.Error("server certificate verifies for a host it was not issued for")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "farm.lab"}); err == nil {
		t.Error("server certificate verifies without the lab CA")
	}

	// A second run (a host added) keeps the CA, so agents keep their ca.pem.
	again, err := Init(dir, []string{"farm.lab", "10.0.0.7"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again.NewCA || again.CAFingerprint != res.CAFingerprint {
		t.Fatalf("second Init made a new CA (%v, %s vs %s)", again.NewCA, again.CAFingerprint, res.CAFingerprint)
	}
	if _, err := readCert(t, filepath.Join(dir, ServerFile)).Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.0.0.7"}); err != nil {
		t.Fatalf("reissued certificate: %v", err)
	}
}

// TestHandshake serves TLS with Init's files: a client with ca.pem
// connects, one without it is refused with an unknown-authority error.
func TestHandshake(t *testing.T) {
	dir := t.TempDir()
	if _, err := Init(dir, []string{"127.0.0.1"}, Options{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := ServerConfig(filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.WriteString(c, "hello"); c.Close() }()
		}
	}()
	pool, err := LoadPool(filepath.Join(dir, CAFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("client with the lab CA: %v", err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "hello" {
		t.Fatalf("read %q", b)
	}
	pinned, err := PinnedClientConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := tls.Dial("tcp", ln.Addr().String(), pinned); err != nil {
		t.Fatalf("client pinning the server certificate: %v", err)
	} else {
		c.Close()
	}
	other := t.TempDir()
	if _, err := Init(other, []string{"127.0.0.1"}, Options{}); err != nil {
		t.Fatal(err)
	}
	otherCfg, _ := ServerConfig(filepath.Join(other, ServerFile), filepath.Join(other, ServerKeyFile))
	wrongPin, _ := PinnedClientConfig(otherCfg)
	if _, err := tls.Dial("tcp", ln.Addr().String(), wrongPin); err == nil {
		t.Fatal("a client pinning another certificate connected")
	}
	_, err = tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: x509.NewCertPool()})
	if err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("client without the lab CA: %v; want an unknown authority error", err)
	}
}

func TestInitErrors(t *testing.T) {
	for _, hosts := range [][]string{nil, {""}, {"bad host"}, {"a..b"}, {"-x.lab"}} {
		if _, err := Init(t.TempDir(), hosts, Options{}); err == nil {
			t.Errorf("hosts %q accepted", hosts)
		}
	}
	dir := t.TempDir()
	if _, err := Init(dir, []string{"localhost"}, Options{}); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, CAKeyFile))
	if _, err := Init(dir, []string{"localhost"}, Options{}); err == nil || !strings.Contains(err.Error(), "no readable CA key") {
		t.Fatalf("CA without its key: %v; want a clear error, not a new CA", err)
	}
	if _, err := LoadPool(filepath.Join(dir, ServerKeyFile)); err == nil {
		t.Fatal("a key file loaded as a CA pool")
	}
	if _, err := ServerConfig(filepath.Join(dir, ServerFile), ""); err == nil {
		t.Fatal("ServerConfig without a key")
	}
}

func TestServerValidityCappedByCA(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	res, err := Init(dir, []string{"localhost"}, Options{CAValidity: 48 * time.Hour, ServerValidity: 1000 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if ca := readCert(t, filepath.Join(dir, CAFile)); res.NotAfter.After(ca.NotAfter) {
		t.Fatalf("server certificate outlives its CA: %v > %v", res.NotAfter, ca.NotAfter)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
