package main

import (
	"io"
	"net"
	"sync"
)

// partition is a TCP relay between refund and the simulator that can cut
// the network: cut closes every relayed connection (calls in flight lose
// their answers, though the simulator still commits them) and refuses new
// ones by closing them at once, until heal.
type partition struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func (r *rig) newPartition() *partition {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	r.must(err)
	p := &partition{ln: ln, target: r.sim.URL()[len("http://"):], conns: map[net.Conn]bool{}}
	go p.serve()
	r.cleanup(func() {
		ln.Close()
		p.setCut(true)
	})
	return p
}

// URL is the base URL to give refund as --api-base.
func (p *partition) URL() string { return "http://" + p.ln.Addr().String() }

func (p *partition) serve() {
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.relay(conn)
	}
}

func (p *partition) relay(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		client.Close()
		server.Close()
		return
	}
	defer p.untrack(client, server)
	done := make(chan struct{}, 2)
	go func() { io.Copy(server, client); done <- struct{}{} }()
	go func() { io.Copy(client, server); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

func (p *partition) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

func (p *partition) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

// setCut cuts the network (closing every open connection) or heals it.
func (p *partition) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}
