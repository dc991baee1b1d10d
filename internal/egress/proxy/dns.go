package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// DNS limits.
const (
	dnsTimeout     = 3 * time.Second // per upstream attempt
	maxDNSMessage  = 65535
	maxDNSInFlight = 512 // UDP queries being answered at once
)

// ServeDNS answers sandboxes' DNS queries on pc (UDP) until it is closed: a
// query for a name the sandbox's policy lets it resolve is forwarded to the
// upstream resolvers and their answer relayed; any other gets REFUSED (and an
// event). Queries from unknown addresses are dropped.
func (p *Proxy) ServeDNS(pc net.PacketConn) error {
	sem := make(chan struct{}, maxDNSInFlight)
	for {
		buf := make([]byte, maxDNSMessage)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // overloaded: the client retries
		}
		go func() {
			defer func() { <-sem }()
			if out := p.answer(addrOf(from), buf[:n], false); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}()
	}
}

// ServeDNSTCP is ServeDNS over TCP (RFC 7766: length-prefixed messages).
func (p *Proxy) ServeDNSTCP(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go p.serveDNSConn(c)
	}
}

func (p *Proxy) serveDNSConn(c net.Conn) {
	defer c.Close()
	from := addrOf(c.RemoteAddr())
	for {
		_ = c.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
		q, err := readDNSTCP(c)
		if err != nil {
			return
		}
		out := p.answer(from, q, true)
		if out == nil {
			return
		}
		if err := writeDNSTCP(c, out); err != nil {
			return
		}
	}
}

func readDNSTCP(r io.Reader) ([]byte, error) {
	var n uint16
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return nil, err
	}
	msg := make([]byte, n)
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func writeDNSTCP(w io.Writer, msg []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
	return err
}

// answer returns the response to query from a sandbox at from; nil drops it.
func (p *Proxy) answer(from netip.Addr, query []byte, tcp bool) []byte {
	sb, pol := p.lookup(from)
	if sb == nil {
		p.emit(Event{Kind: KindDNS, Reason: fmt.Sprintf("unknown sandbox %s", from)})
		return nil
	}
	var parser dnsmessage.Parser
	hdr, err := parser.Start(query)
	if err != nil {
		return nil
	}
	q, err := parser.Question()
	if err != nil {
		return reply(hdr, nil, dnsmessage.RCodeFormatError)
	}
	name := policy.CanonicalName(q.Name.String())
	ok, rule := pol.Resolvable(name)
	if !ok {
		p.emit(Event{Sandbox: sb.id, Kind: KindDNS, Host: name, Reason: "name not allowed"})
		return reply(hdr, &q, dnsmessage.RCodeRefused)
	}
	out, err := p.forwardDNS(query, hdr.ID, tcp)
	if err != nil {
		p.emit(Event{Sandbox: sb.id, Allow: true, Kind: KindDNS, Host: name, Rule: rule, Reason: err.Error()})
		return reply(hdr, &q, dnsmessage.RCodeServerFailure)
	}
	p.emit(Event{Sandbox: sb.id, Allow: true, Kind: KindDNS, Host: name, Rule: rule})
	return out
}

// reply builds a bodiless response to hdr with rcode.
func reply(hdr dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: hdr.ID, Response: true, OpCode: hdr.OpCode,
		RecursionDesired: hdr.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	if q != nil {
		if b.StartQuestions() != nil || b.Question(*q) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// forwardDNS sends query to each upstream in turn until one answers with the
// query's ID.
func (p *Proxy) forwardDNS(query []byte, id uint16, tcp bool) ([]byte, error) {
	if len(p.cfg.DNSUpstreams) == 0 {
		return nil, errors.New("no upstream resolver")
	}
	var errs []error
	for _, up := range p.cfg.DNSUpstreams {
		out, err := exchange(up, query, tcp)
		if err == nil && len(out) >= 2 && binary.BigEndian.Uint16(out) == id {
			return out, nil
		}
		if err == nil {
			err = errors.New("mismatched answer")
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
	}
	return nil, fmt.Errorf("upstream resolvers: %w", errors.Join(errs...))
}

// exchange sends one query to up over UDP or TCP.
func exchange(up netip.AddrPort, query []byte, tcp bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dnsTimeout)
	defer cancel()
	network := "udp"
	if tcp {
		network = "tcp"
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, up.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dnsTimeout))
	if tcp {
		if err := writeDNSTCP(c, query); err != nil {
			return nil, err
		}
		return readDNSTCP(c)
	}
	if _, err := c.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, maxDNSMessage)
	n, err := c.Read(buf)
	return buf[:n], err
}

// NewResolver returns a resolver that asks upstreams (the first that answers),
// for the names the proxy itself resolves.
func NewResolver(upstreams []netip.AddrPort) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		var errs []error
		for _, up := range upstreams {
			c, err := d.DialContext(ctx, network, up.String())
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, fmt.Errorf("no upstream resolver reachable: %w", errors.Join(errs...))
	}}
}
