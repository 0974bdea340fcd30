package agent

import (
	"io"
	"net"
	"sync"
	"testing"
)

// faultProxy forwards TCP (an agent's NATS connection) to a target and can
// cut the link and restore it later: while cut it closes every forwarded
// connection and every new one at once, as a dropped Wi-Fi link or a
// restarting server would. Loopback only.
type faultProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   []net.Conn
	down    bool
	closed  bool
	accepts int // connections forwarded so far
	wg      sync.WaitGroup
}

func startFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// url is the NATS URL of the proxy.
func (p *faultProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down || p.closed
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.down || p.closed {
			p.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		p.accepts++
		p.conns = append(p.conns, c, up)
		p.wg.Add(2)
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer p.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
}

// cut closes every forwarded connection and refuses new ones until restore.
func (p *faultProxy) cut() {
	p.mu.Lock()
	p.down = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// restore forwards new connections again.
func (p *faultProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// forwarded returns how many connections were forwarded so far.
func (p *faultProxy) forwarded() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

func (p *faultProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cut()
	p.ln.Close()
	p.wg.Wait()
}
