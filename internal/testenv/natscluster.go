package testenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATSCluster is a JetStream cluster of in-process nats-servers on
// loopback: every node routes to every other, each has its own store, and
// a node can be killed and restarted on the same ports and store, as a
// real node that crashes and comes back. Its methods are safe for
// concurrent use.
type NATSCluster struct {
	t      testing.TB
	name   string
	mu     sync.Mutex
	opts   []*server.Options
	nodes  []*server.Server // nil while killed
	stores []string
}

// StartNATSCluster starts n nodes (n >= 3 for R3 streams) and waits until
// JetStream has a meta leader. They are shut down when the test ends.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	// A free port may be taken by another test process between freePorts
	// and the node's bind (the node then never gets ready): such a start
	// is retried on fresh ports.
	var err error
	for range 3 {
		var c *NATSCluster
		if c, err = startNATSCluster(t, n); err == nil {
			t.Cleanup(c.Shutdown)
			if err := c.waitMetaLeader(30 * time.Second); err != nil {
				t.Fatalf("testenv: nats cluster: %v", err)
			}
			return c
		}
		t.Logf("testenv: nats cluster: %v; retrying on fresh ports", err)
	}
	t.Fatalf("testenv: nats cluster: %v", err)
	return nil
}

// startNATSCluster starts n nodes on fresh ports, or shuts down the ones
// it started and says which did not get ready.
func startNATSCluster(t testing.TB, n int) (*NATSCluster, error) {
	c := &NATSCluster{t: t, name: "lesfarm-test"}
	clientPorts, clusterPorts := freePorts(t, n), freePorts(t, n)
	dir := t.TempDir()
	for i := range n {
		var routes []*url.URL
		for j := range n {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", clusterPorts[j])})
			}
		}
		c.stores = append(c.stores, filepath.Join(dir, fmt.Sprintf("n%d", i)))
		c.opts = append(c.opts, &server.Options{ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: clientPorts[i],
			JetStream: true, StoreDir: c.stores[i], NoSigs: true, NoLog: true, Routes: routes,
			Cluster: server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: clusterPorts[i]}})
		c.nodes = append(c.nodes, nil)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.Restart(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: free port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// URLs returns every node's client URL, comma-separated, as nats.Connect
// takes them (a client then fails over between nodes).
func (c *NATSCluster) URLs() string {
	var us []string
	for _, o := range c.opts {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
	}
	return strings.Join(us, ",")
}

// URL returns node i's client URL.
func (c *NATSCluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port) }

// Kill shuts node i down (abruptly for its clients: their connections
// drop and they reconnect to the others).
func (c *NATSCluster) Kill(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Restart starts node i again on its ports and store.
func (c *NATSCluster) Restart(i int) error {
	o := c.opts[i].Clone()
	s, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("node %d: %w", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("node %d not ready within 20s", i)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
	return nil
}

// Shutdown stops every node.
func (c *NATSCluster) Shutdown() {
	for i := range c.opts {
		c.Kill(i)
	}
}

// StreamLeader returns the index of the node leading the stream in the
// global account, or -1 when none does (an election is under way).
func (c *NATSCluster) StreamLeader(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		if s != nil && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// WaitStreamLeader waits until the stream has a leader and returns it.
func (c *NATSCluster) WaitStreamLeader(stream string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		if i := c.StreamLeader(stream); i >= 0 {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("stream %s has no leader after %s", stream, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitCurrent waits until node i has caught up with the JetStream cluster
// (after a restart): its meta layer is current.
func (c *NATSCluster) WaitCurrent(i int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		s := c.nodes[i]
		c.mu.Unlock()
		if s != nil && s.JetStreamIsCurrent() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d not current after %s", i, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *NATSCluster) waitMetaLeader(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		for _, s := range c.nodes {
			if s != nil && s.JetStreamIsLeader() {
				c.mu.Unlock()
				return nil
			}
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			return fmt.Errorf("no JetStream meta leader after %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
