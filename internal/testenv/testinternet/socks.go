package testinternet

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
)

// SOCKS5 is a minimal SOCKS5 server (RFC 1928 CONNECT, RFC 1929
// username/password when User is set) that records each target asked for.
type SOCKS5 struct {
	User, Password string
	// Dial connects to a target ("host:port"); names are resolved by it.
	Dial func(network, address string) (net.Conn, error)

	mu      sync.Mutex
	targets []string
}

// Targets returns the CONNECT targets received ("host:port"), oldest first.
func (s *SOCKS5) Targets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.targets...)
}

// Serve accepts on ln until it is closed.
func (s *SOCKS5) Serve(ln net.Listener) {
	serveConns(ln, func(c net.Conn) {
		target, err := s.handshake(c)
		if err != nil {
			return
		}
		up, err := s.Dial("tcp", target)
		if err != nil {
			_, _ = c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		defer up.Close()
		_, _ = c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		_, _ = io.Copy(c, up)
	})
}

// serveConns runs handle on each connection ln accepts (closing it after),
// until ln is closed.
func serveConns(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

func (s *SOCKS5) handshake(c net.Conn) (string, error) {
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[0] != 5 {
		return "", errors.New("not socks5")
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return "", err
	}
	if err := s.auth(c, methods); err != nil {
		return "", err
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(c, req); err != nil || req[1] != 1 {
		return "", errors.New("not CONNECT")
	}
	host, err := readHost(c, req[3])
	if err != nil {
		return "", err
	}
	var port uint16
	if err := binary.Read(c, binary.BigEndian, &port); err != nil {
		return "", err
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(port)))
	s.mu.Lock()
	s.targets = append(s.targets, target)
	s.mu.Unlock()
	return target, nil
}

func (s *SOCKS5) auth(c net.Conn, methods []byte) error {
	if s.User == "" {
		_, err := c.Write([]byte{5, 0})
		return err
	}
	if _, err := c.Write([]byte{5, 2}); err != nil {
		return err
	}
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	user := make([]byte, b[1])
	io.ReadFull(c, user)
	n := make([]byte, 1)
	io.ReadFull(c, n)
	pass := make([]byte, n[0])
	io.ReadFull(c, pass)
	if string(user) != s.User || string(pass) != s.Password {
		_, _ = c.Write([]byte{1, 1})
		return errors.New("bad credentials")
	}
	_, err := c.Write([]byte{1, 0})
	return err
}

func readHost(c net.Conn, atyp byte) (string, error) {
	switch atyp {
	case 1:
		b := make([]byte, 4)
		_, err := io.ReadFull(c, b)
		return net.IP(b).String(), err
	case 3:
		n := make([]byte, 1)
		if _, err := io.ReadFull(c, n); err != nil {
			return "", err
		}
		b := make([]byte, n[0])
		_, err := io.ReadFull(c, b)
		return string(b), err
	}
	return "", errors.New("unsupported address type")
}
