package client

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy is a TCP proxy on 127.0.0.1 that cuts every connection at a
// random point: after a random number of bytes from the daemon (at most
// maxDown), and for one connection in requestCutEvery after a random
// number of bytes of the request (at most 512), so requests break off too.
type cutProxy struct {
	ln      net.Listener
	target  string
	maxDown int

	mu    sync.Mutex // guards rng and conns
	rng   *rand.Rand
	conns map[net.Conn]struct{}

	// script, when not empty, gives the limits of the first connections
	// (in order) instead of the random ones.
	script []cutLimits

	accepted atomic.Int64
	cuts     atomic.Int64 // connections the proxy cut (rather than a side closing)
	wg       sync.WaitGroup
}

const requestCutEvery = 5

// cutLimits are the byte limits of one connection: up to the daemon, down
// from it; -1 is no limit, 0 cuts at the first byte.
type cutLimits struct{ up, down int }

func newCutProxy(t testing.TB, target string, maxDown int, seed uint64, script ...cutLimits) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, maxDown: maxDown, rng: rand.New(rand.NewPCG(seed, 3)), conns: map[net.Conn]struct{}{}, script: script}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *cutProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !add {
		delete(p.conns, c)
		return true
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		down := 1 + p.rng.IntN(p.maxDown)
		up := -1
		if p.rng.IntN(requestCutEvery) == 0 {
			up = 1 + p.rng.IntN(512)
		}
		if len(p.script) > 0 {
			up, down = p.script[0].up, p.script[0].down
			p.script = p.script[1:]
		}
		p.mu.Unlock()
		p.wg.Add(1)
		go p.pipe(c, up, down)
	}
}

// pipe joins c to a new connection to the target and cuts both once up
// bytes went to the daemon (-1: no limit) or down bytes came back.
func (p *cutProxy) pipe(c net.Conn, up, down int) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.track(c, true)
	p.track(s, true)
	var once sync.Once
	cut := func(limited bool) {
		once.Do(func() {
			if limited {
				p.cuts.Add(1)
			}
			c.Close()
			s.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); cut(copyLimited(s, c, up)) }()
	go func() { defer wg.Done(); cut(copyLimited(c, s, down)) }()
	wg.Wait()
	p.track(c, false)
	p.track(s, false)
}

// copyLimited copies src to dst until an error or limit bytes (-1: no
// limit); it reports whether the limit was reached.
func copyLimited(dst io.Writer, src io.Reader, limit int) bool {
	buf := make([]byte, 32<<10)
	left := limit
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if limit >= 0 && n >= left {
				dst.Write(buf[:left])
				return true
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
			left -= n
		}
		if err != nil {
			return false
		}
	}
}

// cutAll cuts every connection open now (a blip); new ones are served.
func (p *cutProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}
