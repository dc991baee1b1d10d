package jupyter

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// Transport is the ZeroMQ transport of a kernel's sockets.
type Transport string

// Transports a connection file can name.
const (
	IPC Transport = "ipc" // unix sockets "<ip>-<port>" in a private directory
	TCP Transport = "tcp" // loopback ports picked before launch (racy, for kernels without ipc)
)

// ConnectionInfo is the content of a kernel connection file (Jupyter client docs,
// "Connection files"). For ipc, IP is a path prefix and the ports are small distinct
// numbers; endpoints are "ipc://<ip>-<port>".
type ConnectionInfo struct {
	Transport       Transport `json:"transport"`
	IP              string    `json:"ip"`
	ShellPort       int       `json:"shell_port"`
	IOPubPort       int       `json:"iopub_port"`
	StdinPort       int       `json:"stdin_port"`
	ControlPort     int       `json:"control_port"`
	HBPort          int       `json:"hb_port"`
	Key             string    `json:"key"`
	SignatureScheme string    `json:"signature_scheme"`
	KernelName      string    `json:"kernel_name,omitempty"`
}

// newConnectionInfo returns connection info with a fresh 32-byte hex key. For IPC
// the sockets live in dir; for TCP five free loopback ports are picked.
func newConnectionInfo(tr Transport, dir string) (ConnectionInfo, error) {
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return ConnectionInfo{}, fmt.Errorf("connection key: %w", err)
	}
	ci := ConnectionInfo{Transport: tr, Key: hex.EncodeToString(key[:]), SignatureScheme: "hmac-sha256"}
	ports := []*int{&ci.ShellPort, &ci.IOPubPort, &ci.StdinPort, &ci.ControlPort, &ci.HBPort}
	switch tr {
	case IPC:
		ci.IP = filepath.Join(dir, "k")
		for i, p := range ports {
			*p = i + 1
		}
	case TCP:
		ci.IP = "127.0.0.1"
		picked, err := freePorts(len(ports))
		if err != nil {
			return ConnectionInfo{}, err
		}
		for i, p := range ports {
			*p = picked[i]
		}
	default:
		return ConnectionInfo{}, fmt.Errorf("unknown transport %q", tr)
	}
	return ci, nil
}

// freePorts asks the kernel for n distinct unused loopback TCP ports. All n
// listeners stay open until the last is picked, so the ports differ; they are
// free again on return, and nothing stops another process from taking one
// before the kernel binds it (Kernel.launch retries a TCP kernel whose start
// fails for that reason).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Endpoint returns the ZeroMQ endpoint for one of the info's ports.
func (ci ConnectionInfo) Endpoint(port int) string {
	if ci.Transport == IPC {
		return "ipc://" + ci.IP + "-" + strconv.Itoa(port)
	}
	return "tcp://" + ci.IP + ":" + strconv.Itoa(port)
}

// write stores the info as a 0600 JSON file at path, owned by uid/gid when
// chown is true.
func (ci ConnectionInfo) write(path string, chown bool, uid, gid int) error {
	b, err := json.MarshalIndent(ci, "", "  ")
	if err != nil {
		return fmt.Errorf("encode connection file: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write connection file: %w", err)
	}
	if chown {
		if err := os.Chown(path, uid, gid); err != nil {
			return fmt.Errorf("chown connection file: %w", err)
		}
	}
	return nil
}
