package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Egress decisions nftables takes on addresses (allowOut and denyOut entries)
// are copied to user space through nfnetlink_log (NFLOG), the first bytes of
// each packet with a prefix saying which set matched: new connections allowed
// by an allowOut entry, and every packet a denyOut entry rejects, each at most
// logRate per second (per server) so a noisy sandbox cannot flood the host.
const (
	logPrefixAllow = "cubby:allow"
	logPrefixDeny  = "cubby:deny"
	logRate        = 20
	logBurst       = 50
	logSnap        = 64 // bytes of each packet: IPv4 header and ports
	logGroupBase   = 20000
	logGroupSpan   = 40000
)

// nfnetlink_log (linux/netfilter/nfnetlink_log.h).
const (
	nfulnlMsgPacket     = 0
	nfulnlMsgConfig     = 1
	nfulaIfindexIndev   = 4
	nfulaPayload        = 9
	nfulaPrefix         = 10
	nfulaCfgCmd         = 1
	nfulaCfgMode        = 2
	nfulaCfgQThresh     = 5
	nfulnlCfgCmdBind    = 1
	nfulnlCopyPacket    = 2
	nfnlSubsysULog      = 4
	nfgenmsgLen         = 4
	nfnetlinkV0         = 0
	ipv4HeaderMinLength = 20
)

// logGroup is the NFLOG group of this Manager's table (one per server).
func (m *Manager) logGroup() uint16 {
	h := fnv.New32a()
	h.Write([]byte(m.cfg.Table))
	return uint16(logGroupBase + h.Sum32()%logGroupSpan)
}

// logExprs rate-limits and logs to the Manager's group with prefix.
func (m *Manager) logExprs(prefix string) []expr.Any {
	return []expr.Any{
		&expr.Limit{Type: expr.LimitTypePkts, Rate: logRate, Unit: expr.LimitTimeSecond, Burst: logBurst},
		&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
			Group: m.logGroup(), Data: []byte(prefix), Snaplen: logSnap},
	}
}

// Decision is one egress decision nftables took for a sandbox.
type Decision struct {
	ID      string         // the sandbox
	Allowed bool           // by an allowOut entry; false: rejected by a denyOut entry
	Proto   uint8          // IP protocol (unix.IPPROTO_TCP ...)
	Dst     netip.AddrPort // destination (port 0 for protocols without ports)
}

// WatchDecisions delivers nftables' egress decisions to fn until ctx is done.
// Errors: the NFLOG group cannot be bound (another process holds it).
func (m *Manager) WatchDecisions(ctx context.Context, fn func(Decision)) error {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return fmt.Errorf("nflog socket: %w", err)
	}
	if err := m.bindLog(c); err != nil {
		c.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	go func() {
		for {
			msgs, err := c.Receive()
			if errors.Is(err, unix.ENOBUFS) {
				m.log.Debug("egress decisions lost: the reader lagged")
				continue
			}
			if err != nil {
				if ctx.Err() == nil {
					m.log.Warn("egress decision log stopped", "err", err)
				}
				return
			}
			for _, msg := range msgs {
				if d, ok := m.decision(msg); ok {
					fn(d)
				}
			}
		}
	}()
	return nil
}

// bindLog binds c to the Manager's group, copying logSnap bytes of packets,
// each sent at once (queue threshold 1; the kernel's default batches up to
// 100 messages or a second).
func (m *Manager) bindLog(c *netlink.Conn) error {
	mode := binary.BigEndian.AppendUint32(nil, logSnap)
	mode = append(mode, nfulnlCopyPacket, 0)
	for _, attr := range []netlink.Attribute{{Type: nfulaCfgCmd, Data: []byte{nfulnlCfgCmdBind}}, {Type: nfulaCfgMode, Data: mode},
		{Type: nfulaCfgQThresh, Data: binary.BigEndian.AppendUint32(nil, 1)}} {
		data, err := netlink.MarshalAttributes([]netlink.Attribute{attr})
		if err != nil {
			return err
		}
		hdr := []byte{unix.AF_UNSPEC, nfnetlinkV0, 0, 0}
		binary.BigEndian.PutUint16(hdr[2:], m.logGroup())
		msg := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysULog<<8 | nfulnlMsgConfig),
			Flags: netlink.Request | netlink.Acknowledge}, Data: append(hdr, data...)}
		if _, err := c.Execute(msg); err != nil {
			return fmt.Errorf("bind nflog group %d: %w", m.logGroup(), err)
		}
	}
	return nil
}

// decision parses one NFLOG packet message of a sandbox link.
func (m *Manager) decision(msg netlink.Message) (Decision, bool) {
	if msg.Header.Type != netlink.HeaderType(nfnlSubsysULog<<8|nfulnlMsgPacket) || len(msg.Data) < nfgenmsgLen {
		return Decision{}, false
	}
	ad, err := netlink.NewAttributeDecoder(msg.Data[nfgenmsgLen:])
	if err != nil {
		return Decision{}, false
	}
	ad.ByteOrder = binary.BigEndian
	var d Decision
	var prefix string
	var payload []byte
	var ifindex uint32
	for ad.Next() {
		switch ad.Type() {
		case nfulaPrefix:
			prefix = ad.String()
		case nfulaIfindexIndev:
			ifindex = ad.Uint32()
		case nfulaPayload:
			payload = ad.Bytes()
		}
	}
	if ad.Err() != nil || (prefix != logPrefixAllow && prefix != logPrefixDeny) {
		return Decision{}, false
	}
	d.Allowed = prefix == logPrefixAllow
	var ok bool
	if d.Proto, d.Dst, ok = packetDst(payload); !ok {
		return Decision{}, false
	}
	d.ID, ok = m.idOfIfindex(int(ifindex))
	return d, ok
}

// packetDst reads the protocol, destination address and (TCP, UDP) port of an
// IPv4 packet.
func packetDst(p []byte) (uint8, netip.AddrPort, bool) {
	if len(p) < ipv4HeaderMinLength || p[0]>>4 != 4 {
		return 0, netip.AddrPort{}, false
	}
	ihl := int(p[0]&0x0f) * 4
	dst := netip.AddrFrom4([4]byte(p[16:20]))
	proto := p[9]
	var port uint16
	if (proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_UDP) && len(p) >= ihl+4 {
		port = binary.BigEndian.Uint16(p[ihl+2:])
	}
	return proto, netip.AddrPortFrom(dst, port), true
}

// idOfIfindex returns the sandbox whose host link has index ifindex.
func (m *Manager) idOfIfindex(ifindex int) (string, bool) {
	iface, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return "", false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, s := range m.sbx {
		if s.ready && m.vethName(id) == iface.Name {
			return id, true
		}
	}
	return "", false
}
