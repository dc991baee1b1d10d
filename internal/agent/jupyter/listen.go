package jupyter

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// procNetTCP lists the TCP sockets of the caller's network namespace (IPv4 and
// IPv6; proc(5) "/proc/net/tcp").
var procNetTCP = []string{"/proc/net/tcp", "/proc/net/tcp6"}

// tcpListen is the state of a listening socket in /proc/net/tcp ("0A").
const tcpListen = "0A"

// listeningPorts returns the local ports of the listening TCP sockets of the
// caller's network namespace; nil when procfs does not list sockets.
func listeningPorts() (map[int]bool, error) {
	var ports map[int]bool
	for _, path := range procNetTCP {
		f, err := os.Open(path)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		if ports == nil {
			ports = map[int]bool{}
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != tcpListen {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
				ports[int(p)] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
	}
	return ports, nil
}

// waitListening polls every `every` until each of ports has a listening socket
// in the caller's network namespace, so that no connection reaches a kernel
// while it is still binding its sockets (some kernels, e.g. the Rapaio Java
// kernel on jeromq, then never read what a client connected early sends).
// It returns ctx's error, or early with nil when dead is closed (the caller
// reports the process exit) or when procfs lists no sockets (nothing to wait for).
func waitListening(ctx context.Context, ports []int, every time.Duration, dead <-chan struct{}) error {
	for {
		open, err := listeningPorts()
		if err != nil {
			return fmt.Errorf("wait for kernel ports: %w", err)
		}
		if open == nil {
			return nil
		}
		missing := 0
		for _, p := range ports {
			if !open[p] {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for kernel ports (%d of %d not listening): %w", missing, len(ports), ctx.Err())
		case <-dead:
			return nil
		case <-time.After(every):
		}
	}
}
