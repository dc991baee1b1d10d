package testinternet

import (
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// DNSServer answers A queries for its names over UDP (NXDOMAIN for others)
// and remembers every name asked.
type DNSServer struct {
	Names Names
	mu    sync.Mutex
	asked []string
}

// Set makes name resolve to addr.
func (d *DNSServer) Set(name string, addr netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.Names[name] = addr
}

// Asked returns the names queried so far (lower case, no trailing dot).
func (d *DNSServer) Asked() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// Serve answers on pc until it is closed.
func (d *DNSServer) Serve(pc net.PacketConn) {
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if out := d.answer(buf[:n]); out != nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

func (d *DNSServer) answer(q []byte) []byte {
	var p dnsmessage.Parser
	hdr, err := p.Start(q)
	if err != nil {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(question.Name.String()), ".")
	d.mu.Lock()
	d.asked = append(d.asked, name)
	d.mu.Unlock()
	addr, ok := d.lookup(name)
	rcode := dnsmessage.RCodeSuccess
	if !ok {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: hdr.ID, Response: true, Authoritative: true,
		RecursionDesired: hdr.RecursionDesired, RCode: rcode})
	_ = b.StartQuestions()
	_ = b.Question(question)
	if ok && question.Type == dnsmessage.TypeA {
		_ = b.StartAnswers()
		_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: addr.As4()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// lookup finds name, or the longest "*.suffix" entry matching it.
func (d *DNSServer) lookup(name string) (netip.Addr, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.Names[name]; ok {
		return v, true
	}
	for rest := name; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return netip.Addr{}, false
		}
		rest = rest[i+1:]
		if v, ok := d.Names["*."+rest]; ok {
			return v, true
		}
	}
}
